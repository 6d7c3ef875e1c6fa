--[[
  Ends deliveries of a topic, many per call: success, a retry later, or death (after the
  caller stored the job in the dead_job table). Only the delivery holding the lease may end
  a job: one cancelled or reclaimed meanwhile is not touched, so a late completion cannot
  resurrect it.

  Input:
    KEYS[1] running: in-flight zset
    KEYS[2] delayed: delay zset
    KEYS[3] pool: job pool hash
    KEYS[4] finished: finished zset    {jobs:<topic>}:finished   score = finish time, ms
    KEYS[5] counts: topic counters hash {jobs:<topic>}:counts     done, dead: jobs that
                                                   ended so (the caller stored a dead one in
                                                   dead_job)
    ARGV[1] now_ms: now, epoch ms
    ARGV[2] keep: finished jobs kept per topic
    ARGV[3..] deliveries: five per delivery: job id, lease token, outcome (done | retry | dead),
                                 retry at (epoch ms), error text

  Output: one per delivery, in order: 1 applied, 0 the lease is no longer this delivery's
]]
local now, keep = ARGV[1], tonumber(ARGV[2])
local out = {}
local finished_any = false
for i = 3, #ARGV, 5 do
  local id, lease, outcome = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if redis.call('HGET', KEYS[3], id .. '/lease') ~= lease then
    out[#out + 1] = 0
  else
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[3], id .. '/lease')
    if outcome == 'retry' then
      redis.call('HSET', KEYS[3], id .. '/error', ARGV[i + 4])
      redis.call('ZADD', KEYS[2], ARGV[i + 3], id)
    elseif outcome == 'dead' then
      redis.call('HINCRBY', KEYS[5], 'dead', 1)
      redis.call('HDEL', KEYS[3], id, id .. '/attempts', id .. '/error', id .. '/status',
        id .. '/stalls')
    else
      redis.call('HDEL', KEYS[3], id .. '/stalls')
      redis.call('HINCRBY', KEYS[5], 'done', 1)
      redis.call('HSET', KEYS[3], id .. '/status', 'DONE')
      redis.call('ZADD', KEYS[4], now, id)
      finished_any = true
    end
    out[#out + 1] = 1
  end
end
-- Keep the newest finished jobs only: forget the oldest beyond the limit.
if finished_any then
  local excess = redis.call('ZCARD', KEYS[4]) - keep
  if excess > 0 then
    for _, old in ipairs(redis.call('ZRANGE', KEYS[4], 0, excess - 1)) do
      redis.call('HDEL', KEYS[3], old, old .. '/attempts', old .. '/error', old .. '/status',
        old .. '/stalls')
    end
    redis.call('ZREMRANGEBYRANK', KEYS[4], 0, excess - 1)
  end
end
return out
