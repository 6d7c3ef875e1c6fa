-- Jobs of the delay queue that have not ended: the record behind Redis's delay zset, ready
-- list and in-flight zset, so that a Redis that loses its data loses no scheduled work
-- (`engage rebuild` schedules every row again). A row is written before its job reaches
-- Redis and leaves when the job ends: done, cancelled, or dead (then dead_job has it).
-- `run_at_ms` and `attempts` follow the job's retries; deliveries in between are not written
-- (one statement per delivery on the hot path), so a rebuilt job may run once more.
-- `seq` names one scheduling of the id (an id can be scheduled again once its job ended): it
-- is the job's `seq` in Redis, so an ending removes its own row and never a newer one, and it
-- orders a rebuild's chunks.
CREATE TABLE pending_job (
    topic         TEXT   NOT NULL,
    job_id        TEXT   NOT NULL,
    seq           BIGINT NOT NULL,
    body          TEXT   NOT NULL,
    callback_url  TEXT,
    run_at_ms     BIGINT NOT NULL,
    attempts      BIGINT NOT NULL,
    max_attempts  BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (topic, job_id)
);
CREATE UNIQUE INDEX pending_job_by_seq ON pending_job (seq);

-- The backstop of order expiry (src/vouchers/sweep.rs) reads unpaid orders by pay-by time;
-- the expiry job is the queue's, this index is for when that job was lost.
CREATE INDEX orders_unpaid_by_pay_by ON orders (pay_by_ms, id) WHERE status = 'UNPAID';
