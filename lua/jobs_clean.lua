--[[
  Forgets finished jobs of one state (DONE or CANCELLED) that ended before a time, oldest
  first, at most `limit` per call.

  Input:
    KEYS[1] finished: finished zset    {jobs:<topic>}:finished   score = finish time, ms
    KEYS[2] jobs: a job's hash is this and its id   {jobs:<topic>}:job:
    ARGV[1] status: DONE | CANCELLED
    ARGV[2] before_ms: ended before this, epoch ms
    ARGV[3] limit: most jobs to look at

  Output: how many were forgotten
]]
-- @include jobs_fields.lua
local removed = {}
local ended = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2], 'LIMIT', 0, ARGV[3])
for _, id in ipairs(ended) do
  if redis.call('HGET', KEYS[2] .. id, 'status') == ARGV[1] then
    removed[#removed + 1] = id
  end
end
forget_jobs(KEYS[2], removed)
call_sliced('ZREM', KEYS[1], removed, 1)
return #removed
