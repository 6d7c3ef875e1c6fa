--[[
  Removes a user from a live season's board (a cheater's), for the rest of the season: the
  user leaves the part of the board that holds them, which re-ranks everyone below, and
  joins the part's removed set, which every award reads (lua/include/points_award.lua): the
  user's later awards still count toward their balance and caps, never the board. SQL
  records the removal first (`season_removals`), so that `engage rebuild` and the rollover
  honour it too.

  The change is published as lua/include/points_award.lua publishes an award's, with the
  new score `-` (readers read the board afresh).

  Input:
    KEYS[1] board: the user's part of the season board   {points:B}:board:<YYYYMM>
    KEYS[2] removed: that part's removed users            {points:B}:board:<YYYYMM>:removed
    KEYS[3] changes: that part's change counter           {points:B}:board:<YYYYMM>:changes
    KEYS[4] hold: rebuild hold                            {points:B}:rebuilding
    ARGV[1] user: user id
    ARGV[2] channel: the channel of the board's part
    ARGV[3] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node

  Output: OK the user was on the board, NOT_FOUND the user was not (still recorded as
          removed), HELD while a rebuild holds points writes back (nothing written)
]]
-- @include status.lua
-- @include points_award.lua

if held(KEYS[4]) then
  return HELD
end

redis.call('SADD', KEYS[2], ARGV[1])
local old = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not old then
  return NOT_FOUND
end
redis.call('ZREM', KEYS[1], ARGV[1])
local change = redis.call('INCR', KEYS[3])
redis.call(ARGV[3], ARGV[2], table.concat({change, ARGV[1], string.format('%.0f', tonumber(old)), '-'}, ' '))
return OK
