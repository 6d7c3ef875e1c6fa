-- A job's own fields in its topic's pool (`<id>/<part>`), and its bounded history.
local JOB_PARTS = {'attempts', 'error', 'status', 'stalls', 'priority', 'lease', 'progress',
  'result', 'started', 'finished', 'runs', 'history'}
-- Events kept per job: the newest, the oldest forgotten.
local HISTORY_KEPT = 20

-- Forgets a job: its JSON and every field of it.
local function forget_job(pool, id)
  local fields = {id}
  for _, part in ipairs(JOB_PARTS) do
    fields[#fields + 1] = id .. '/' .. part
  end
  redis.call('HDEL', pool, unpack(fields))
end

-- Adds an event to a job's history: {at, state, attempt, error}.
local function job_event(pool, id, at, state, attempt, error_text)
  local field = id .. '/history'
  local stored = redis.call('HGET', pool, field)
  local events = stored and cjson.decode(stored) or {}
  events[#events + 1] = {tonumber(at), state, tonumber(attempt) or 0, error_text or ''}
  while #events > HISTORY_KEPT do
    table.remove(events, 1)
  end
  redis.call('HSET', pool, field, cjson.encode(events))
end
