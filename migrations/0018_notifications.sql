-- Notifications (src/features/notifications): what happened to a user, written by the
-- consumers of other features' events, kept 90 days.

-- One notification. `seq` is its place in its user's list (newest highest): a grouped like
-- that grows takes the next one, so it moves to the top. A notification is read when its
-- `seq` is at most its user's `read_seq` (`notification_states`): marking read is one
-- watermark, not a row per notification. The text is rendered when written.
CREATE TABLE notifications (
    id            BIGINT PRIMARY KEY,
    user_id       BIGINT NOT NULL,
    seq           BIGINT NOT NULL,
    kind          TEXT   NOT NULL,
    actor_id      BIGINT,
    remark_id     BIGINT,
    order_id      BIGINT,
    board_key     TEXT,
    others        BIGINT NOT NULL DEFAULT 0,
    text          TEXT   NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
CREATE UNIQUE INDEX notifications_by_user ON notifications (user_id, seq);
CREATE INDEX notifications_by_remark ON notifications (user_id, remark_id, created_at_ms);
CREATE INDEX notifications_by_age ON notifications (updated_at_ms);

-- Each user's list: the last `seq` given, the read watermark, the unread count (the
-- notifications with `seq` above `read_seq`) and a version that grows with every change, so
-- that Redis keeps the newest state whatever order the writes reach it in.
CREATE TABLE notification_states (
    user_id  BIGINT PRIMARY KEY,
    last_seq BIGINT NOT NULL,
    read_seq BIGINT NOT NULL,
    unread   BIGINT NOT NULL,
    version  BIGINT NOT NULL
);

-- What each notification was made of (a stream entry, a job, a reward's key): a replay of
-- the same source finds it here and changes nothing.
CREATE TABLE notification_sources (
    source_key      TEXT   PRIMARY KEY,
    notification_id BIGINT NOT NULL,
    created_at_ms   BIGINT NOT NULL
);
CREATE INDEX notification_sources_by_age ON notification_sources (created_at_ms);
