--[[
  Forgets finished jobs of one state (DONE or CANCELLED) that ended before a time, oldest
  first, at most `limit` per call.

  Input:
    KEYS[1] finished: finished zset    {jobs:<topic>}:finished   score = finish time, ms
    KEYS[2] pool: job pool hash     {jobs:<topic>}:pool
    ARGV[1] status: DONE | CANCELLED
    ARGV[2] before_ms: ended before this, epoch ms
    ARGV[3] limit: most jobs to look at

  Output: how many were forgotten
]]
-- @include jobs_fields.lua
local removed = 0
local ended = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2], 'LIMIT', 0, ARGV[3])
for _, id in ipairs(ended) do
  if redis.call('HGET', KEYS[2], id .. '/status') == ARGV[1] then
    forget_job(KEYS[2], id)
    redis.call('ZREM', KEYS[1], id)
    removed = removed + 1
  end
end
return removed
