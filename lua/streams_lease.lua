--[[
  Divides a consumer's streams among the instances that run it, by leases, the way a Kafka
  consumer group divides partitions: each live instance holds at most its share
  (ceil(streams / live instances)), takes free or expired leases up to it, gives back what
  is above it, and renews what it keeps.

  Input:
    KEYS[1] members: the live instances        {leases:<consumer>}:members (zset: instance -> expiry ms)
    KEYS[2] holders: the leases                 {leases:<consumer>}:holders (hash: stream -> "<instance> <expiry ms>")
    ARGV[1] instance: this instance
    ARGV[2] now_ms: now, ms
    ARGV[3] lease_ms: lease time, ms
    ARGV[4] leaving: 1 when the instance leaves (gives back everything), 0 otherwise
    ARGV[5..] streams: every stream of the consumer, in one order for every instance

  Output: the streams this instance holds now.
]]
local me, now, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local leaving = ARGV[4] == '1'
local expiry = now + ttl

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if leaving then
  redis.call('ZREM', KEYS[1], me)
else
  redis.call('ZADD', KEYS[1], expiry, me)
end
local live = redis.call('ZCARD', KEYS[1])
local share = 0
if not leaving and live > 0 then
  share = math.ceil((#ARGV - 4) / live)
end

local mine, free = {}, {}
for i = 5, #ARGV do
  local stream = ARGV[i]
  local lease = redis.call('HGET', KEYS[2], stream)
  local holder, held_until = nil, 0
  if lease then
    local space = string.find(lease, ' ', 1, true)
    holder = string.sub(lease, 1, space - 1)
    held_until = tonumber(string.sub(lease, space + 1))
  end
  if held_until <= now then
    table.insert(free, stream)
  elseif holder == me then
    table.insert(mine, stream)
  end
end

while #mine > share do
  redis.call('HDEL', KEYS[2], table.remove(mine))
end
for _, stream in ipairs(free) do
  if #mine >= share then
    break
  end
  table.insert(mine, stream)
end
for _, stream in ipairs(mine) do
  redis.call('HSET', KEYS[2], stream, me .. ' ' .. expiry)
end
-- Forgotten with the last instance.
redis.call('PEXPIRE', KEYS[1], ttl * 6)
redis.call('PEXPIRE', KEYS[2], ttl * 6)
return mine
