--[[
  Reads a persisted query and marks it used, so that the least recently used ones are
  evicted first (see apq_register.lua).

  Input:
    KEYS[1] documents: hash   {apq}:documents   field = SHA-256 hex, value = the query text
    KEYS[2] recency: zset     {apq}:recency     member = SHA-256 hex, score = last use, epoch ms
    ARGV[1] hash: SHA-256 hex of the query
    ARGV[2] now_ms: now, epoch ms

  Output: the query text, or nil when it is not stored
]]
local query = redis.call('HGET', KEYS[1], ARGV[1])
if query then
  redis.call('ZADD', KEYS[2], 'XX', ARGV[2], ARGV[1])
end
return query
