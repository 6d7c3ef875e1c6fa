-- Shared by the spend and revoke scripts: a user's balance hash holds what was earned
-- (every award adds to it, lua/include/points_award.lua), spent and revoked, each only ever
-- increased; the balance is earned - spent - revoked.
local function balance_of(balance_key)
  local held = redis.call('HMGET', balance_key, 'earned', 'spent', 'revoked')
  return tonumber(held[1] or '0'), tonumber(held[2] or '0'), tonumber(held[3] or '0')
end
