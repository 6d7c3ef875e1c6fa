--[[
  Moves due jobs of a topic to its ready list, and jobs whose visibility deadline passed
  (their worker died or hung: a stall) back to the front of it. A stall does not use one of
  the job's attempts (the delivery never reported back); it is counted under <id>/stalls,
  and the taker buries a job that stalled more often than its topic allows. Atomic, so
  every instance may run it on every tick without a lock and no job moves twice.

  Input:
    KEYS[1] delayed: delay zset        {jobs:<topic>}:delayed
    KEYS[2] ready: ready list        {jobs:<topic>}:ready
    KEYS[3] running: in-flight zset    {jobs:<topic>}:running   score = visibility deadline, ms
    KEYS[4] pool: job pool hash     {jobs:<topic>}:pool
    ARGV[1] now_ms: now, epoch ms
    ARGV[2] limit: most jobs to move

  Output: { promoted, reclaimed, ready list length, next visit, run-at of each promoted
            job... }; next visit = when the topic needs promoting again: now while jobs are
            ready, else the earliest due time or visibility deadline, -1 when it has no
            pending job at all (the caller drops it from the index of due topics)
]]
local now, limit = ARGV[1], tonumber(ARGV[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
local out = {0, 0, 0, -1}
for i = 1, #due, 2 do
  redis.call('RPUSH', KEYS[2], due[i])
  redis.call('ZREM', KEYS[1], due[i])
  out[#out + 1] = due[i + 1]
end
out[1] = #due / 2
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id .. '/lease')
  redis.call('HINCRBY', KEYS[4], id .. '/stalls', 1)
  redis.call('HINCRBY', KEYS[4], id .. '/attempts', -1)
  redis.call('LPUSH', KEYS[2], id)
end
out[2] = #expired
out[3] = redis.call('LLEN', KEYS[2])
if out[3] > 0 then
  out[4] = tonumber(now)
else
  for _, key in ipairs({KEYS[1], KEYS[3]}) do
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if first[2] and (out[4] == -1 or tonumber(first[2]) < out[4]) then
      out[4] = tonumber(first[2])
    end
  end
end
return out
