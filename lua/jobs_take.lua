--[[
  Takes up to ARGV[3] ready jobs, each with a visibility deadline (a plain BLPOP would
  lose a job whose worker dies; here it comes back when the deadline passes, and its
  deliverer extends the deadline while the handler runs).

  Input:
    KEYS[1] ready: ready list
    KEYS[2] running: in-flight zset
    KEYS[3] pool: job pool hash
    ARGV[1] deadline_ms: visibility deadline, epoch ms
    ARGV[2] lease_prefix: lease token prefix of this take
    ARGV[3] most: most jobs to take

  Output: { id, job JSON, attempts (this one included), lease, stalls, ... } - five per job;
          stalls = deliveries of the job whose lease ran out (the caller buries a job that
          stalled more often than its topic allows instead of running it again)
]]
local out = {}
for n = 1, tonumber(ARGV[3]) do
  local id = redis.call('LPOP', KEYS[1])
  if not id then
    break
  end
  local job = redis.call('HGET', KEYS[3], id)
  if job then
    local lease = ARGV[2] .. ':' .. n
    redis.call('ZADD', KEYS[2], ARGV[1], id)
    redis.call('HSET', KEYS[3], id .. '/lease', lease)
    out[#out + 1] = id
    out[#out + 1] = job
    out[#out + 1] = redis.call('HINCRBY', KEYS[3], id .. '/attempts', 1)
    out[#out + 1] = lease
    out[#out + 1] = tonumber(redis.call('HGET', KEYS[3], id .. '/stalls') or '0')
  end
end
return out
