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

-- Spends `amount` of the user's points once per idempotency key, atomically against the
-- balance (see lua/points_spend.lua): answers { status, earned, spent, revoked } after the
-- call, status OK, ALREADY (the key spent before) or OVER_LIMIT (short: nothing written).
-- `extra` (optional) is a list of more field/value pairs for the event (a freeze bought).
local function spend(balances_key, marker_key, events_key, user, amount, now_ms, season,
                     marker_ttl, key, reason, extra)
  local earned, spent, revoked = balance_of(balances_key, user)
  if redis.call('EXISTS', marker_key) == 1 then
    return {ALREADY, earned, spent, revoked}
  end
  if earned - spent - revoked < amount then
    return {OVER_LIMIT, earned, spent, revoked}
  end
  spent = redis.call('HINCRBY', balances_key, user .. ':spent', amount)
  redis.call('SET', marker_key, -amount, 'EX', marker_ttl)
  -- Unpacked (src/infra/streams/mod.rs): two values are the caller's free text.
  local fields = {'user', user, 'type', 'SPEND', 'points', -amount, 'requested', amount,
    'season', season, 'at', now_ms, 'key', key, 'reason', reason}
  for _, value in ipairs(extra or {}) do
    fields[#fields + 1] = value
  end
  redis.call('XADD', events_key, '*', unpack(fields))
  return {OK, earned, spent, revoked}
end
