--[[
  Buys a streak freeze with points: the spend (lua/include/points_balance.lua) and the
  freeze it buys are one script, so that no purchase takes the points without giving the
  freeze, and none gives a freeze past the most a user may hold. Idempotent on its key as a
  spend is: a repeat changes nothing.

  Input:
    KEYS[1] balances: the bucket's balances         {points:B}:balances
    KEYS[2] marker: the spend's idempotency marker  {points:B}:award:<user>:<key>
    KEYS[3] events: points stream                   {points:B}:events
    KEYS[4] hold: rebuild hold                      {points:B}:rebuilding
    KEYS[5] streak: streak hash                     {points:B}:streak:<user>
    ARGV[1] user: user id
    ARGV[2] cost: the points a freeze costs (more than 0)
    ARGV[3] now_ms: now, epoch ms
    ARGV[4] season: the season the spend is made in (YYYYMM)
    ARGV[5] marker_ttl_seconds: marker TTL seconds
    ARGV[6] idempotency: the purchase's idempotency key (freeze:<key>)
    ARGV[7] reason: the spend's reason
    ARGV[8] freezes_max: freezes a user may hold
    ARGV[9] day_number: the user's today, YYYYMMDD (the streak_freezes row of the purchase)

  Output: { status, freezes held after the call }
    status (lua/include/status.lua) OK bought, ALREADY bought before under this key
           (nothing changed), TAKEN the user holds the most freezes already, OVER_LIMIT the
           balance is short, HELD while a rebuild holds points writes back (nothing written)
]]
-- @include status.lua
-- @include points_award.lua
-- @include points_balance.lua

local held_now = tonumber(redis.call('HGET', KEYS[5], 'freezes') or '0')
if held(KEYS[4]) then
  return {HELD, held_now}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {ALREADY, held_now}
end
if held_now >= tonumber(ARGV[8]) then
  return {TAKEN, held_now}
end
local spent = spend(KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4],
  ARGV[5], ARGV[6], ARGV[7], {'bought', ARGV[9]})
if spent[1] ~= OK then
  return {spent[1], held_now}
end
return {OK, redis.call('HINCRBY', KEYS[5], 'freezes', 1)}
