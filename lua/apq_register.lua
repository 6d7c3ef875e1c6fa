--[[
  Stores a persisted query within the store's byte budget: documents unused for longer
  than the expiry are forgotten, then the least recently used ones until the new one fits.
  The budget holds whatever clients register, so anyone may register and the store cannot
  fill Redis.

  Input:
    KEYS[1] documents: hash   {apq}:documents   field = SHA-256 hex, value = the query text
    KEYS[2] recency: zset     {apq}:recency     member = SHA-256 hex, score = last use, epoch ms
    KEYS[3] bytes: counter    {apq}:bytes       what the stored documents count against the budget
    ARGV[1] hash: SHA-256 hex of the query
    ARGV[2] query: the query text
    ARGV[3] now_ms: now, epoch ms
    ARGV[4] budget: the store's budget, bytes
    ARGV[5] unused_for_ms: a document unused this long (ms) is forgotten

  Output: { status, documents evicted }
    status (lua/include/status.lua) OK stored, ALREADY stored before (now marked used),
           OVER_LIMIT larger than the budget

  A document counts its length plus ENTRY_OVERHEAD bytes (its hash field, its recency
  member and what Redis keeps for each), so that many small documents cannot outgrow the
  budget in memory either. One hash rather than a key per document: eviction then needs no
  key built here, and the three keys share one slot.
]]
-- @include status.lua
local ENTRY_OVERHEAD = 256
local hash, query, now, budget = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

local function forget(member)
  local length = redis.call('HSTRLEN', KEYS[1], member)
  if redis.call('HDEL', KEYS[1], member) == 1 then
    redis.call('DECRBY', KEYS[3], length + ENTRY_OVERHEAD)
  end
  redis.call('ZREM', KEYS[2], member)
end

if redis.call('HEXISTS', KEYS[1], hash) == 1 then
  redis.call('ZADD', KEYS[2], now, hash)
  return {ALREADY, 0}
end
local cost = #query + ENTRY_OVERHEAD
if cost > budget then
  return {OVER_LIMIT, 0}
end

local evicted = 0
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[5]), 'LIMIT', 0, 100)
for _, member in ipairs(stale) do
  forget(member)
  evicted = evicted + 1
end
while tonumber(redis.call('GET', KEYS[3]) or '0') + cost > budget do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #oldest == 0 then
    -- Nothing left to evict yet over budget: the counter drifted from what is stored
    -- (a key lost to maxmemory, say). Start again from an empty store.
    redis.call('DEL', KEYS[1])
    redis.call('SET', KEYS[3], 0)
    break
  end
  forget(oldest[1])
  evicted = evicted + 1
end
redis.call('HSET', KEYS[1], hash, query)
redis.call('ZADD', KEYS[2], now, hash)
redis.call('INCRBY', KEYS[3], cost)
return {OK, evicted}
