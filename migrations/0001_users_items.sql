-- Users are created on first sight of a valid token; items are created by admins.
-- Times are epoch milliseconds (the sqlx Any driver carries no date types).
CREATE TABLE users (
    id            BIGINT PRIMARY KEY,
    name          TEXT   NOT NULL,
    avatar_url    TEXT,
    created_at_ms BIGINT NOT NULL
);

CREATE TABLE items (
    id            BIGINT PRIMARY KEY,
    name          TEXT   NOT NULL,
    lat           DOUBLE PRECISION,
    lng           DOUBLE PRECISION,
    created_by    BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL
);
