-- What a rebuild of Redis needs from SQL that the earlier tables did not hold.

-- Every sign-in and make-up, one row per user and day (written by the points archive from
-- the sign-in scripts' awards). made_up = 1 for a missed day signed later.
CREATE TABLE sign_ins (
    user_id      BIGINT  NOT NULL,
    day          INTEGER NOT NULL, -- yyyymmdd in ENGAGE_TIMEZONE
    made_up      INTEGER NOT NULL, -- 0 or 1
    signed_at_ms BIGINT  NOT NULL,
    PRIMARY KEY (user_id, day)
);

-- Sign-ins archived before this table existed, from their awards' keys
-- (signin:<user>:<YYYY-MM-DD>, makeup:<user>:<YYYY-MM-DD>).
INSERT INTO sign_ins (user_id, day, made_up, signed_at_ms)
SELECT user_id,
       CAST(REPLACE(SUBSTR(idempotency_key, LENGTH(idempotency_key) - 9), '-', '') AS INTEGER),
       CASE WHEN idempotency_key LIKE 'makeup:%' THEN 1 ELSE 0 END,
       MIN(awarded_at_ms)
FROM points_record
WHERE kind = 'SIGN_IN'
  AND (idempotency_key LIKE 'signin:%' OR idempotency_key LIKE 'makeup:%')
GROUP BY 1, 2, 3
ON CONFLICT DO NOTHING;

-- An idempotency key pays once for ever, not only while its Redis marker lives. Repeats
-- archived before this index existed were double payments; the first one stays.
DELETE FROM points_record
    WHERE rowid NOT IN (
        SELECT MIN(rowid) FROM points_record GROUP BY user_id, idempotency_key
    );
CREATE UNIQUE INDEX points_record_once ON points_record (user_id, idempotency_key);
CREATE INDEX points_record_by_season ON points_record (season, user_id);
CREATE INDEX points_record_by_date ON points_record (award_date, user_id);

-- An author's latest remarks: their outbox, and the backfill of a new follower's inbox.
CREATE INDEX remarks_by_author ON remarks (author_id, id);
