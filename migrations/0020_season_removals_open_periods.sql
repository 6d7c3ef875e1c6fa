-- Users removed from a live season's board (removeBoardRecord on `season`, a cheater's):
-- the record every path that builds or adds to that season's board honours (awards leave
-- the board alone, `engage rebuild` and the rollover leave the user out). The user's
-- points and balance stay as they are. `points_record.award_date` is from now on the
-- user's day (in the user's zone) whose daily cap counted the award.
CREATE TABLE season_removals (
    season         INTEGER NOT NULL, -- YYYYMM
    user_id        BIGINT  NOT NULL,
    removed_at_ms  BIGINT  NOT NULL,
    PRIMARY KEY (season, user_id)
);

-- The periods of boards that hold records and are not closed yet, with the time each is
-- due to close (its reset, or its tournament's end; NULL: only by closeBoardPeriod). A
-- submission records its period here; closing it (`board_periods`) deletes the row in the
-- same transaction. The check that closes due periods reads this index, not the records.
CREATE TABLE board_open_periods (
    board_key      TEXT    NOT NULL,
    period         TEXT    NOT NULL,
    closes_at_ms   BIGINT,
    PRIMARY KEY (board_key, period)
);
CREATE INDEX board_open_periods_by_close ON board_open_periods (closes_at_ms);
-- The archives left unfinished are found by their status.
CREATE INDEX board_periods_by_status ON board_periods (status);
-- Periods open before this version are checked once at the next pass, which records
-- their closing time.
INSERT INTO board_open_periods (board_key, period, closes_at_ms)
SELECT DISTINCT r.board_key, r.period, 0 FROM board_records r WHERE NOT EXISTS
    (SELECT 1 FROM board_periods p WHERE p.board_key = r.board_key AND p.period = r.period);
