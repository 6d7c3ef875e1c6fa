--[[
  Spends a user's points once per idempotency key, atomically against the balance: the
  check and the spend are one script, so no two spends can both take the last points and
  the balance never goes below zero. A spend refused for a short balance writes nothing
  (its key stays free for a later try). A spend is XADDed like an award, with negative
  points and its reason, and archived to `points_record`; no board counts it.

  Input:
    KEYS[1] balances: the bucket's balances         {points:B}:balances
    KEYS[2] marker: the spend's idempotency marker  {points:B}:award:<user>:<key>
    KEYS[3] events: points stream                   {points:B}:events
    KEYS[4] hold: rebuild hold                      {points:B}:rebuilding
    ARGV[1] user: user id
    ARGV[2] amount: points to spend (more than 0)
    ARGV[3] now_ms: now, epoch ms
    ARGV[4] season: the season the spend is made in (YYYYMM)
    ARGV[5] marker_ttl_seconds: marker TTL seconds
    ARGV[6] idempotency: the spend's idempotency key (namespaced: spend:<key>, …)
    ARGV[7] reason: why, the caller's free text

  Output: { status, earned, spent, revoked } after the call
    status (lua/include/status.lua) OK spent, ALREADY the key spent before (nothing
           changed), OVER_LIMIT the balance is short (nothing written), HELD while a rebuild
           holds points writes back (nothing written)
]]
-- @include status.lua
-- @include points_award.lua
-- @include points_balance.lua

if held(KEYS[4]) then
  return {HELD, 0, 0, 0}
end

return spend(KEYS[1], KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5],
  ARGV[6], ARGV[7])
