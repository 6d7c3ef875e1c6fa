-- Writes committed here whose Redis side is not confirmed yet, one table per kind of write,
-- as `remark_announcements` is for remarks. A row is written in its write's own transaction
-- and deleted once Redis took what it says; each instance's retrier delivers what is left
-- (src/infra/outbox.rs), so a write that was acknowledged reaches Redis even when Redis
-- refused it at the time.

-- A follow or an unfollow that changed `follows`: its follower count moves by `delta`
-- (counted once per change id), and the follower's set and inbox follow what `follows` holds.
CREATE TABLE follow_changes (
    id            BIGINT PRIMARY KEY,
    follower_id   BIGINT NOT NULL,
    followee_id   BIGINT NOT NULL,
    delta         BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
CREATE INDEX follow_changes_by_relation ON follow_changes (follower_id, followee_id);

-- A new item with a location, not yet on the map of "near me".
CREATE TABLE item_placements (
    item_id       BIGINT PRIMARY KEY,
    created_at_ms BIGINT NOT NULL
);

-- A new voucher whose stock and window are not yet in Redis.
CREATE TABLE voucher_preloads (
    voucher_id    BIGINT PRIMARY KEY,
    created_at_ms BIGINT NOT NULL
);
