--[[
  Moves jobs of a topic out of the one pool hash an earlier version kept per topic (a job's
  JSON under `<id>`, its bookkeeping under `<id>/<part>`) into a hash per job
  (jobs_fields.lua), and forgets them there. Once a pool is empty Redis drops it.

  Input:
    KEYS[1] pool: the earlier version's pool hash   {jobs:<topic>}:pool
    KEYS[2] jobs: a job's hash is this and its id   {jobs:<topic>}:job:
    KEYS[3] counts: topic counters hash {jobs:<topic>}:counts   prioritised (jobs_schedule.lua)
    ARGV[1..] ids: ids of jobs in the pool

  Output: how many jobs were moved
]]
local PARTS = {'attempts', 'error', 'status', 'stalls', 'priority', 'lease', 'progress',
  'result', 'started', 'finished', 'runs', 'history'}
local moved = 0
for _, id in ipairs(ARGV) do
  local fields = {id}
  for _, part in ipairs(PARTS) do
    fields[#fields + 1] = id .. '/' .. part
  end
  local held = redis.call('HMGET', KEYS[1], unpack(fields))
  if held[6] then
    redis.call('HSET', KEYS[3], 'prioritised', 1)
  end
  local set = {}
  if held[1] then
    set = {'job', held[1]}
    for n, part in ipairs(PARTS) do
      if held[n + 1] then
        set[#set + 1] = part
        set[#set + 1] = held[n + 1]
      end
    end
    redis.call('HSET', KEYS[2] .. id, unpack(set))
    moved = moved + 1
  end
  redis.call('HDEL', KEYS[1], unpack(fields))
end
return moved
