-- Users of an identity provider, known to it by a subject of its own (`auth0|abc123`):
-- each (issuer, subject) maps to the internal user id given at first sight.
CREATE TABLE user_subjects (
    issuer        TEXT   NOT NULL,
    subject       TEXT   NOT NULL,
    user_id       BIGINT NOT NULL UNIQUE,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (issuer, subject)
);
