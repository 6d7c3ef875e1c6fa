-- Every points award (insert-only), written by the points archive consumer.
CREATE TABLE points_record (
    event_id        TEXT    PRIMARY KEY,
    user_id         BIGINT  NOT NULL,
    kind            TEXT    NOT NULL,
    points          BIGINT  NOT NULL,
    requested       BIGINT  NOT NULL,
    idempotency_key TEXT    NOT NULL,
    season          INTEGER NOT NULL, -- YYYYMM
    awarded_at_ms   BIGINT  NOT NULL,
    award_date      INTEGER NOT NULL, -- yyyymmdd in ENGAGE_TIMEZONE
    event_order     BIGINT  NOT NULL  -- stream ms * 1e6 + seq
);
CREATE INDEX points_record_by_user ON points_record (user_id, event_order);

-- Rollover of finished seasons: progress (resumable), the archived boards, the winners.
CREATE TABLE season_archives (
    season        INTEGER PRIMARY KEY,
    total         BIGINT  NOT NULL,
    copied        BIGINT  NOT NULL DEFAULT 0,
    status        TEXT    NOT NULL, -- copying, verified, done
    fence         BIGINT  NOT NULL DEFAULT 0,
    updated_at_ms BIGINT  NOT NULL
);

-- A partition per season (season_ranks_YYYYMM), created by the rollover before it copies.
CREATE TABLE season_ranks (
    season  INTEGER NOT NULL,
    rank    BIGINT  NOT NULL,
    user_id BIGINT  NOT NULL,
    points  BIGINT  NOT NULL,
    PRIMARY KEY (season, rank)
) PARTITION BY LIST (season);
CREATE INDEX season_ranks_by_user ON season_ranks (season, user_id);

CREATE TABLE season_winners (
    season  INTEGER NOT NULL,
    rank    INTEGER NOT NULL,
    user_id BIGINT  NOT NULL,
    points  BIGINT  NOT NULL,
    PRIMARY KEY (season, rank)
);
