-- Streaks in each user's own time zone, with freezes.

-- Each user's time zone, one row per change (the first row: the zone the user started in,
-- with no previous one). `from_day` is the first day (yyyymmdd) counted in `zone`; before
-- it the user's days follow `previous_zone`, up to the day before. `changed_on` is the
-- user's day when the change was made: one change a day.
CREATE TABLE sign_in_zones (
    user_id       BIGINT  NOT NULL,
    zone          TEXT    NOT NULL,
    previous_zone TEXT,
    from_day      INTEGER,
    changed_on    INTEGER,
    changed_at_ms BIGINT  NOT NULL,
    PRIMARY KEY (user_id, changed_at_ms)
);
CREATE UNIQUE INDEX sign_in_zones_once_a_day ON sign_in_zones (user_id, changed_on);

-- A day kept by a streak freeze rather than signed (sign_ins.day is now in the user's zone).
ALTER TABLE sign_ins ADD COLUMN frozen INTEGER NOT NULL DEFAULT 0;

-- Streak freezes earned and used: what a user holds is the sum of `delta`. One row per
-- user, day and reason (EARNED on the day a streak reached a multiple of 7, USED on the
-- frozen day).
CREATE TABLE streak_freezes (
    user_id  BIGINT  NOT NULL,
    day      INTEGER NOT NULL,
    reason   TEXT    NOT NULL,
    delta    INTEGER NOT NULL,
    at_ms    BIGINT  NOT NULL,
    PRIMARY KEY (user_id, day, reason)
);
