--[[
  Awards points of a type to a user once per idempotency key, within the type's daily cap
  (a partial award up to the cap is allowed): one award (`awardPoints`), or a batch of
  awards in one bucket, each as if made alone, in the order given. The consumers that pay
  for other features' events (likes received, remarks written, the intake) read their
  awards in batches: one call per batch instead of one per award.

  Input:
    KEYS[1] board: season board          {points:B}:board:<YYYYMM>
    KEYS[2] events: points stream         {points:B}:events
    KEYS[3] hold: rebuild hold          {points:B}:rebuilding
    KEYS[4] changes: the board's changes   {points:B}:board:<YYYYMM>:changes
    KEYS[5] balances: the bucket's balances  {points:B}:balances
    KEYS[6] removed: the users removed from the board  {points:B}:board:<YYYYMM>:removed
    KEYS[7..] awards: per award, two keys: the user's today's points hash
              {points:B}:daily:<user>:<YYYYMMDD> (the user's day, in the user's zone)
              and its idempotency marker {points:B}:award:<user>:<key>
    ARGV[1] now_ms: now, epoch ms
    ARGV[2] season_seconds: seconds since the season began
    ARGV[3] season: season id
    ARGV[4] channel: board channel
    ARGV[5] marker_ttl_seconds: marker TTL seconds
    ARGV[6] daily_ttl_seconds: daily hash TTL seconds
    ARGV[7] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node
    ARGV[8..] awards: per award, six arguments: user id, type, requested points, daily cap
              (-1: none), the user's today YYYYMMDD (the daily hash's day), idempotency key

  Output: { OK, awarded_1, duplicate_1 (0/1), awarded_2, duplicate_2, ... } - a duplicate
          answers what its first award paid; { HELD } while a rebuild holds awards back
          (nothing of the batch is written).
]]
-- @include status.lua
-- @include points_award.lua

if held(KEYS[3]) then
  return {HELD}
end

local FIXED_ARGS = 7
local awards = (#ARGV - FIXED_ARGS) / 6
local live = {ARGV[7], ARGV[4], KEYS[4]}
local reply = {OK}
for i = 0, awards - 1 do
  local daily_key, marker_key = KEYS[7 + 2 * i], KEYS[8 + 2 * i]
  local at = FIXED_ARGS + 6 * i
  local prior = redis.call('GET', marker_key)
  if prior then
    reply[#reply + 1] = tonumber(prior)
    reply[#reply + 1] = 1
  else
    local awarded = award(daily_key, KEYS[5], KEYS[1], KEYS[6], KEYS[2], ARGV[at + 1], ARGV[at + 2],
      tonumber(ARGV[at + 3]), tonumber(ARGV[at + 4]), ARGV[1], tonumber(ARGV[2]), ARGV[3], live,
      ARGV[at + 6], ARGV[6], ARGV[at + 5])
    redis.call('SET', marker_key, awarded, 'EX', ARGV[5])
    reply[#reply + 1] = awarded
    reply[#reply + 1] = 0
  end
end
return reply
