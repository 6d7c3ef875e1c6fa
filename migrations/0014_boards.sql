-- Boards: many leaderboards, each with its own reset, operator and order. SQL is the record
-- of each board, its records, its joins and the idempotency keys of its submissions; Redis
-- holds the live ranks (rebuilt from here by `engage rebuild`).
CREATE TABLE boards (
    board_key      TEXT    NOT NULL PRIMARY KEY,
    title          TEXT    NOT NULL,
    reset          TEXT    NOT NULL, -- NEVER, DAILY, WEEKLY, MONTHLY
    operator       TEXT    NOT NULL, -- INCREMENT, DECREMENT, BEST, SET
    sort_order     TEXT    NOT NULL, -- DESC, ASC
    authoritative  INTEGER NOT NULL, -- 0 or 1
    starts_at_ms   BIGINT,
    ends_at_ms     BIGINT,
    join_required  INTEGER NOT NULL, -- 0 or 1
    max_entries    BIGINT,
    rewards        TEXT    NOT NULL, -- JSON: [{fromRank, toRank, points, voucherId}]
    created_at_ms  BIGINT  NOT NULL
);

-- The current record of each user on each period of a board. `version` orders the writes
-- of one record (the submit script's count), so a late SQL write never undoes a newer one.
CREATE TABLE board_records (
    board_key      TEXT    NOT NULL,
    period         TEXT    NOT NULL,
    user_id        BIGINT  NOT NULL,
    score          BIGINT  NOT NULL,
    subscore       BIGINT  NOT NULL,
    reached_at_ms  BIGINT  NOT NULL, -- when it reached this score: ties go to the earliest
    updated_at_ms  BIGINT  NOT NULL,
    metadata       TEXT,
    version        BIGINT  NOT NULL,
    PRIMARY KEY (board_key, period, user_id)
);

-- Every idempotency key a submission used, for ever: a replay changes nothing.
CREATE TABLE board_submissions (
    board_key        TEXT   NOT NULL,
    user_id          BIGINT NOT NULL,
    idempotency_key  TEXT   NOT NULL,
    period           TEXT   NOT NULL,
    submitted_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (board_key, user_id, idempotency_key)
);

-- Who joined a board that requires joining.
CREATE TABLE board_joins (
    board_key     TEXT   NOT NULL,
    user_id       BIGINT NOT NULL,
    joined_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (board_key, user_id)
);

-- Closed periods and their archive's progress: closed early (closeBoardPeriod, early = 1),
-- or at their reset or a tournament's end. The next period of a reset window with closures
-- early is named `<base>.<early closures + 1>`.
CREATE TABLE board_periods (
    board_key      TEXT    NOT NULL,
    period         TEXT    NOT NULL,
    base           TEXT    NOT NULL,
    early          INTEGER NOT NULL, -- 0 or 1
    closed_at_ms   BIGINT  NOT NULL,
    total          BIGINT  NOT NULL,
    copied         BIGINT  NOT NULL,
    status         TEXT    NOT NULL, -- closing, copying, verified, done
    fence          BIGINT  NOT NULL,
    updated_at_ms  BIGINT  NOT NULL,
    PRIMARY KEY (board_key, period)
);
CREATE INDEX board_periods_by_base ON board_periods (board_key, base);

-- The ranks of an archived period, in order.
CREATE TABLE board_ranks (
    board_key  TEXT    NOT NULL,
    period     TEXT    NOT NULL,
    rank       BIGINT  NOT NULL,
    user_id    BIGINT  NOT NULL,
    score      BIGINT  NOT NULL,
    subscore   BIGINT  NOT NULL,
    member     TEXT    NOT NULL, -- its member in the live board (the copy's cursor)
    PRIMARY KEY (board_key, period, rank)
);
CREATE UNIQUE INDEX board_ranks_by_user ON board_ranks (board_key, period, user_id);

-- Rewards paid for a closed period, one row per rank: written before the award it stands
-- for (whose idempotency key makes the payment itself once), marked paid after.
CREATE TABLE board_rewards (
    board_key   TEXT    NOT NULL,
    period      TEXT    NOT NULL,
    rank        BIGINT  NOT NULL,
    user_id     BIGINT  NOT NULL,
    points      BIGINT  NOT NULL,
    voucher_id  BIGINT,
    paid_at_ms  BIGINT,
    PRIMARY KEY (board_key, period, rank)
);
CREATE INDEX board_rewards_by_user ON board_rewards (user_id);
