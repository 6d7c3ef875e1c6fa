-- Stream entries that could not be archived after several attempts, with the last error.
-- Nothing is dropped: an operator can fix the cause and re-add the payload to its stream.
CREATE TABLE dead_letters (
    stream         TEXT   NOT NULL,
    entry_id       TEXT   NOT NULL,
    consumer_group TEXT   NOT NULL,
    payload        TEXT   NOT NULL,
    error          TEXT   NOT NULL,
    attempts       BIGINT NOT NULL,
    failed_at_ms   BIGINT NOT NULL,
    PRIMARY KEY (stream, entry_id, consumer_group)
);
