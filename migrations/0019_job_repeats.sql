-- Runs a repeating job's series has ended so far (done, or dead after its attempts), which a
-- rebuild gives back so that the series' limit still holds; its repeat rule is kept with the
-- job's other options (pending_job.options: "repeat").
ALTER TABLE pending_job ADD COLUMN runs BIGINT NOT NULL DEFAULT 0;

-- When a dead job was first scheduled (NULL for those that died before this column).
ALTER TABLE dead_job ADD COLUMN created_at_ms BIGINT;
