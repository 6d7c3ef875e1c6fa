--[[
  Ends a delivery: success, a retry later, or death (after the caller stored the job in
  the dead_job table). Only the delivery holding the lease may do it: a job cancelled or
  reclaimed meanwhile is not touched, so a late completion cannot resurrect it.

  Input:
    KEYS[1] in-flight zset   KEYS[2] delay zset   KEYS[3] job pool hash
    KEYS[4] finished zset    {jobs:<topic>}:finished   score = finish time, ms
    ARGV[1] job id   ARGV[2] lease token   ARGV[3] outcome: done | retry | dead
    ARGV[4] now, epoch ms   ARGV[5] retry at, epoch ms   ARGV[6] error text
    ARGV[7] finished jobs kept per topic

  Output: 1 applied, 0 the lease is no longer this delivery's
]]
local id = ARGV[1]
if redis.call('HGET', KEYS[3], id .. ':lease') ~= ARGV[2] then
  return 0
end
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[3], id .. ':lease')
local outcome = ARGV[3]
if outcome == 'retry' then
  redis.call('HSET', KEYS[3], id .. ':error', ARGV[6])
  redis.call('ZADD', KEYS[2], ARGV[5], id)
  return 1
end
if outcome == 'dead' then
  redis.call('HDEL', KEYS[3], id, id .. ':attempts', id .. ':error', id .. ':status')
  return 1
end
redis.call('HSET', KEYS[3], id .. ':status', 'DONE')
redis.call('ZADD', KEYS[4], ARGV[4], id)
-- Keep the newest finished jobs only: forget the oldest beyond the limit.
local keep = tonumber(ARGV[7])
local excess = redis.call('ZCARD', KEYS[4]) - keep
if excess > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[4], 0, excess - 1)) do
    redis.call('HDEL', KEYS[3], old, old .. ':attempts', old .. ':error', old .. ':status')
  end
  redis.call('ZREMRANGEBYRANK', KEYS[4], 0, excess - 1)
end
return 1
