--[[
  Awards points of a type to a user once per idempotency key, within the type's daily cap
  (a partial award up to the cap is allowed).

  Input:
    KEYS[1] today's points hash   {points:B}:daily:<user>:<YYYYMMDD>
    KEYS[2] idempotency marker    {points:B}:award:<user>:<key>
    KEYS[3] season board          {points:B}:board:<YYYYMM>
    KEYS[4] points stream         {points:B}:events
    KEYS[5] rebuild hold          {points:B}:rebuilding
    ARGV[1] user id   ARGV[2] type   ARGV[3] requested points   ARGV[4] daily cap (-1: none)
    ARGV[5] now, epoch ms   ARGV[6] seconds since the season began   ARGV[7] season id
    ARGV[8] board channel   ARGV[9] idempotency key   ARGV[10] marker TTL seconds
    ARGV[11] daily hash TTL seconds   ARGV[12] the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node

  Output: { points_awarded, duplicate (0/1) } - a duplicate answers the first award;
          { HELD, 0 } while a rebuild holds awards back.
]]
-- @include status.lua
-- @include points_award.lua

if held(KEYS[5]) then
  return {HELD, 0}
end

local prior = redis.call('GET', KEYS[2])
if prior then
  return {tonumber(prior), 1}
end
local awarded = award(KEYS[1], KEYS[3], KEYS[4], ARGV[1], ARGV[2], tonumber(ARGV[3]),
  tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), ARGV[7], {ARGV[12], ARGV[8]}, ARGV[9], ARGV[11])
redis.call('SET', KEYS[2], awarded, 'EX', ARGV[10])
return {awarded, 0}
