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
