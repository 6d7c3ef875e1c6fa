-- Jobs of the delay queue that used up their attempts, with the last error.
-- An admin can re-queue one (requeued_at_ms is then set).
CREATE TABLE dead_job (
    topic          TEXT   NOT NULL,
    job_id         TEXT   NOT NULL,
    body           TEXT   NOT NULL,
    callback_url   TEXT,
    attempts       BIGINT NOT NULL,
    max_attempts   BIGINT NOT NULL,
    last_error     TEXT   NOT NULL,
    died_at_ms     BIGINT NOT NULL,
    requeued_at_ms BIGINT,
    PRIMARY KEY (topic, job_id, died_at_ms)
);
