-- Remarks (reviews) of items, one per user per item, and the insert-only vote archive.
CREATE TABLE remarks (
    id               BIGINT  PRIMARY KEY,
    item_id          BIGINT  NOT NULL REFERENCES items (id),
    author_id        BIGINT  NOT NULL,
    score            INTEGER NOT NULL CHECK (score BETWEEN 1 AND 5),
    content          TEXT    NOT NULL,
    images           TEXT    NOT NULL DEFAULT '[]', -- JSON array of URLs
    created_at_ms    BIGINT  NOT NULL,
    -- Rolled up by the vote archive: the count after the newest archived vote.
    like_count       BIGINT  NOT NULL DEFAULT 0,
    like_count_order BIGINT  NOT NULL DEFAULT 0,
    UNIQUE (item_id, author_id)
);
CREATE INDEX remarks_by_item ON remarks (item_id, id DESC);
CREATE INDEX remarks_by_likes ON remarks (item_id, like_count DESC, id);

-- One row per changed vote, never updated, partitioned by month of vote_date. Monthly
-- partitions (vote_log_YYYYMM) are created by the archive before it writes into them.
-- event_order = stream ms * 1e6 + seq orders the votes of one remark.
CREATE TABLE vote_log (
    event_id    TEXT    NOT NULL,
    remark_id   BIGINT  NOT NULL,
    voter_id    BIGINT  NOT NULL,
    voting      INTEGER NOT NULL, -- 1 like, 0 unlike
    like_count  BIGINT  NOT NULL, -- the count after this vote
    voted_at_ms BIGINT  NOT NULL,
    vote_date   INTEGER NOT NULL, -- yyyymmdd in ENGAGE_TIMEZONE
    event_order BIGINT  NOT NULL,
    PRIMARY KEY (event_id, vote_date)
) PARTITION BY RANGE (vote_date);
CREATE INDEX vote_log_by_voter ON vote_log (remark_id, voter_id, event_order);
