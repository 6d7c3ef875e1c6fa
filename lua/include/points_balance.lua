-- Shared by the spend and revoke scripts. The balances of a bucket's users are one hash
-- (`{points:B}:balances`), three fields a user: `<user>:earned` (every award adds to it,
-- lua/include/points_award.lua), `<user>:spent` and `<user>:revoked`, each only ever
-- increased; a balance is earned - spent - revoked. One hash a bucket, not one a user, so
-- that a rebuild swaps a bucket's balances in at once, as it swaps a board's part.
local function balance_of(balances_key, user)
  local held = redis.call('HMGET', balances_key, user .. ':earned', user .. ':spent',
    user .. ':revoked')
  return tonumber(held[1] or '0'), tonumber(held[2] or '0'), tonumber(held[3] or '0')
end
