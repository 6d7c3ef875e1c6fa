--[[
  Revokes one award once: adds what it paid to the user's revoked points (the balance may
  go below zero by that much, no more) and takes it off the part of the award's season
  board that holds the user, keeping the user's tie-breaker; a user left with no points
  leaves the board. A season the rollover archived has no board in Redis any more: its
  archived ranks stay as they were. The revoke is XADDed like an award, with the award's type, negative
  points and its reason, and archived to `points_record`.

  The board's change is published as lua/include/points_award.lua publishes an award's,
  but for a user who leaves the board: its new score is `-`, which readers take as no
  change they can apply (they read the board afresh).

  Input:
    KEYS[1] balances: the bucket's balances            {points:B}:balances
    KEYS[2] marker: the revoke's idempotency marker    {points:B}:award:<user>:<revoke key>
    KEYS[3] board: the award's season board (the user's part) {points:B}:board:<YYYYMM>
    KEYS[4] changes: that part's change counter        {points:B}:board:<YYYYMM>:changes
    KEYS[5] events: points stream                      {points:B}:events
    KEYS[6] hold: rebuild hold                         {points:B}:rebuilding
    ARGV[1] user: user id
    ARGV[2] kind: the award's type
    ARGV[3] amount: what the award paid (0 or more)
    ARGV[4] season: the award's season (YYYYMM)
    ARGV[5] now_ms: now, epoch ms
    ARGV[6] channel: the channel of the board's part
    ARGV[7] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node
    ARGV[8] marker_ttl_seconds: marker TTL seconds
    ARGV[9] idempotency: the revoke's idempotency key (revoke:<the award's key>)
    ARGV[10] reason: why, the caller's free text

  Output: { status, earned, spent, revoked } after the call
    status (lua/include/status.lua) OK revoked, ALREADY revoked before (nothing changed),
           HELD while a rebuild holds points writes back (nothing written)
]]
-- @include status.lua
-- @include points_award.lua
-- @include points_balance.lua

if held(KEYS[6]) then
  return {HELD, 0, 0, 0}
end

local earned, spent, revoked = balance_of(KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {ALREADY, earned, spent, revoked}
end
local amount = tonumber(ARGV[3])
local taken = 0 - amount -- never -0, which Lua would write as such
if amount > 0 then
  revoked = redis.call('HINCRBY', KEYS[1], ARGV[1] .. ':revoked', amount)
  local old = redis.call('ZSCORE', KEYS[3], ARGV[1])
  if old then
    old = tonumber(old)
    local points = board_points(old)
    local left = points - amount
    local new = '-'
    if left > 0 then
      new = string.format('%.0f', old - amount * SCORE_TIME_UNIT)
      redis.call('ZADD', KEYS[3], new, ARGV[1])
    else
      redis.call('ZREM', KEYS[3], ARGV[1])
    end
    local change = redis.call('INCR', KEYS[4])
    redis.call(ARGV[7], ARGV[6], table.concat({change, ARGV[1], string.format('%.0f', old), new}, ' '))
  end
end
redis.call('SET', KEYS[2], taken, 'EX', ARGV[8])
-- Unpacked (src/infra/streams/mod.rs): two values are the caller's free text.
redis.call('XADD', KEYS[5], '*', 'user', ARGV[1], 'type', ARGV[2], 'points', taken,
  'requested', amount, 'season', ARGV[4], 'at', ARGV[5], 'key', ARGV[9], 'reason', ARGV[10])
return {OK, earned, spent, revoked}
