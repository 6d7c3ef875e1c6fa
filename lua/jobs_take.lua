--[[
  Takes the next ready job with a visibility deadline (the seed's BLPOP would lose a job
  whose worker dies; here it returns when the deadline passes).

  Input:
    KEYS[1] ready list   KEYS[2] in-flight zset   KEYS[3] job pool hash
    ARGV[1] visibility deadline, epoch ms   ARGV[2] lease token of this delivery

  Output: {} when nothing is ready, else { id, job JSON, attempts (this one included) }
]]
local id = redis.call('LPOP', KEYS[1])
if not id then
  return {}
end
local job = redis.call('HGET', KEYS[3], id)
if not job then
  return {}
end
redis.call('ZADD', KEYS[2], ARGV[1], id)
redis.call('HSET', KEYS[3], id .. ':lease', ARGV[2])
local attempts = redis.call('HINCRBY', KEYS[3], id .. ':attempts', 1)
return {id, job, attempts}
