-- New remarks whose announcement on the remark stream (read by the feed's fan-out and by
-- the points for writing a remark) has not been confirmed yet. A row is written in the
-- remark's own transaction and deleted once its entry is in the stream; the announcer
-- announces what is left, so a remark that was acknowledged is always announced, even when
-- Redis refused the announcement at the time.
CREATE TABLE remark_announcements (
    remark_id     BIGINT PRIMARY KEY,
    author_id     BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
