-- Fewer index pages written per like: each like archives a vote and an award, and SQLite
-- writes every page an insert touches to the WAL at each commit.

-- A vote is unique by its remark, voter and order (a remark's votes all go through one
-- stream, whose ids order them), so the index every read of the log already uses is also
-- the one that makes a replayed batch insert nothing; the event id's own index, a third
-- b-tree written per vote, goes. SQLite cannot drop a primary key: the table is copied.
CREATE TABLE vote_log_keyed (
    event_id    TEXT    NOT NULL,
    remark_id   BIGINT  NOT NULL,
    voter_id    BIGINT  NOT NULL,
    voting      INTEGER NOT NULL, -- 1 like, 0 unlike
    like_count  BIGINT  NOT NULL, -- the count after this vote
    voted_at_ms BIGINT  NOT NULL,
    vote_date   INTEGER NOT NULL, -- yyyymmdd in ENGAGE_TIMEZONE
    event_order BIGINT  NOT NULL
);
CREATE UNIQUE INDEX vote_log_once ON vote_log_keyed (remark_id, voter_id, event_order);
-- The first of a (never seen) repeat stays.
INSERT OR IGNORE INTO vote_log_keyed
    (event_id, remark_id, voter_id, voting, like_count, voted_at_ms, vote_date, event_order)
SELECT event_id, remark_id, voter_id, voting, like_count, voted_at_ms, vote_date, event_order
FROM vote_log ORDER BY rowid;
DROP TABLE vote_log;
ALTER TABLE vote_log_keyed RENAME TO vote_log;
CREATE INDEX vote_log_by_voter_newest ON vote_log (voter_id, event_order);

-- A day's awards in the order they arrive: every award of today goes to the end of the
-- index, where (award_date, user_id) put each at its user's place. Today's totals, the one
-- reader, group the day's rows themselves.
DROP INDEX points_record_by_date;
CREATE INDEX points_record_by_date ON points_record (award_date);
