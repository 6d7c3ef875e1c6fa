-- The settings of a delay-queue topic that an admin or a service set: paused (1) or not, and
-- its limits (NULL: none). Redis's {jobs:<topic>}:settings hash is what the take script reads;
-- this row is its record, written first, so that `engage rebuild` can give it back.
CREATE TABLE job_topic (
    topic         TEXT   NOT NULL PRIMARY KEY,
    paused        BIGINT NOT NULL DEFAULT 0,
    per_second    BIGINT,
    concurrency   BIGINT,
    updated_at_ms BIGINT NOT NULL
);

-- A pending job's priority (0 to 1000, higher first once due), which a rebuild gives back.
ALTER TABLE pending_job ADD COLUMN priority BIGINT NOT NULL DEFAULT 0;

-- A dead job's priority, which a requeue gives back.
ALTER TABLE dead_job ADD COLUMN priority BIGINT NOT NULL DEFAULT 0;

-- A pending job's own options, as JSON: its backoff ({"kind": "FIXED" | "EXPONENTIAL" |
-- "LADDER", "delay_seconds", "max_delay_seconds"}), remove_on_complete, remove_on_fail;
-- NULL: none (its topic's ladder and retention).
ALTER TABLE pending_job ADD COLUMN options TEXT;
