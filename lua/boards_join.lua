--[[
  Joins a user to a board that requires joining, within its cap on entries: the check and
  the join are one step, so concurrent joins never pass the cap.

  Input:
    KEYS[1] joins: the board's joined users   {board:<key>}:joins
    ARGV[1] user: the user id
    ARGV[2] max_entries: the cap (-1: none)

  Output: { OK, joined } a new entry, { ALREADY, joined } joined before,
          { SOLD_OUT, joined } the cap is reached
]]
-- @include status.lua

if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then
  return {ALREADY, redis.call('SCARD', KEYS[1])}
end
local joined = redis.call('SCARD', KEYS[1])
local cap = tonumber(ARGV[2])
if cap >= 0 and joined >= cap then
  return {SOLD_OUT, joined}
end
redis.call('SADD', KEYS[1], ARGV[1])
return {OK, joined + 1}
