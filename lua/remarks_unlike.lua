--[[
  Withdraws a voter's like of a remark.

  Input: as remarks_like.lua (its keys and arguments; likers_kept unused).
  Output: { status, likes, liked, changed } with the same status codes.

  Events: on a change, XADD a VoteEvent {remark, voter, author, voting=0, count, at, first=0}
          (src/features/remarks/events.rs, packed as remarks_like.lua's) and PUBLISH the count.

  The relation becomes "0" (with the TTL) rather than being deleted: a missing key means
  "ask the archive", and the archive may not hold this unlike yet.
]]
-- @include status.lua
-- @include remarks_relation.lua

local author, relation = read_relation(KEYS[1], KEYS[2], ARGV[5])
if not author then
  return {relation, 0, 0, 0}
end
local ttl = tonumber(ARGV[4])
if relation ~= '1' then
  redis.call('SET', KEYS[2], '0', 'EX', ttl)
  return {OK, tonumber(redis.call('HGET', KEYS[1], 'likes') or '0'), 0, 0}
end

redis.call('SET', KEYS[2], '0', 'EX', ttl)
local likes = redis.call('HINCRBY', KEYS[1], 'likes', -1)
redis.call('ZREM', KEYS[3], ARGV[1])
add_vote_event(KEYS[4], ARGV[2], ARGV[1], author, 0, likes, ARGV[3], 0)
redis.call(ARGV[8], ARGV[6], likes)
return {OK, likes, 0, 1}
