-- Shared by the points scripts (included by build.rs): awards points within a daily cap,
-- adds them to the season board, XADDs the award and publishes the board's change (`live`:
-- the publish command, SPUBLISH or PUBLISH, the channel, and the change counter of the
-- board's part, a key in the part's slot).
--
-- A change of the board is published as `<change> <user> <old score> <new score>`: the
-- part's change counter after this change (INCR, so every change of the part has the next
-- number), the user, and the user's board scores before (`-`: not on the board) and after.
-- myRankChanged's reader (src/features/leaderboard/live.rs) moves its viewers' ranks by it
-- without reading the board, and knows from the numbers which changes a read reflects.
-- @include leaderboard_score.lua

-- While `engage rebuild` rewrites the points from SQL, it holds awards back: the scripts
-- answer HELD (lua/include/status.lua) without writing, and the server tries again shortly
-- (src/features/points/recovery.rs).
local function held(hold_key)
  return redis.call('EXISTS', hold_key) == 1
end

-- Every decision is XADDed, a zero award too, as an AwardEvent (src/features/points/events.rs):
-- SQL then knows each idempotency key that was used, and each sign-in. `extra` (optional)
-- is a list of more field/value pairs (a sign-in's `day` and `made_up`). What is awarded is
-- also earned on the user's balance (`balances_key`, the bucket's balances: see
-- lua/include/points_balance.lua). `date` is the user's day (YYYYMMDD) whose totals
-- `daily_key` holds: the caller computes it from the user's zone, and the event carries it,
-- so that SQL archives the award on the day its cap counted it.
--
-- A user removed from the season's board (`removed_key`, the part's removed users:
-- lua/leaderboard_remove.lua) is awarded as any other, but the board is left alone.
local function award(daily_key, balances_key, board_key, removed_key, stream_key, user, kind,
                     requested, cap, now_ms, season_seconds, season, live, idempotency, day_ttl,
                     date, extra)
  local allowed = requested
  if cap >= 0 then
    local today = tonumber(redis.call('HGET', daily_key, kind) or '0')
    allowed = math.max(0, math.min(requested, cap - today))
  end
  if allowed > 0 then
    redis.call('HINCRBY', daily_key, kind, allowed)
    redis.call('EXPIRE', daily_key, day_ttl)
    redis.call('HINCRBY', balances_key, user .. ':earned', allowed)
  end
  if allowed > 0 and redis.call('SISMEMBER', removed_key, user) == 0 then
    local old = redis.call('ZSCORE', board_key, user)
    local points = board_points(tonumber(old or '0')) + allowed
    local score = string.format('%.0f', board_score(points, season_seconds))
    redis.call('ZADD', board_key, score, user)
    local change = redis.call('INCR', live[3])
    old = old and string.format('%.0f', tonumber(old)) or '-'
    redis.call(live[1], live[2], table.concat({change, user, old, score}, ' '))
  end
  -- Packed (src/infra/streams/mod.rs), the key last: it is the caller's free text.
  local names = {'user', 'type', 'points', 'requested', 'season', 'at', 'date'}
  local values = {user, kind, allowed, requested, season, now_ms, date}
  for i = 1, #(extra or {}), 2 do
    names[#names + 1] = extra[i]
    values[#values + 1] = extra[i + 1]
  end
  names[#names + 1] = 'key'
  values[#values + 1] = idempotency
  redis.call('XADD', stream_key, '*', table.concat(names, ' '), table.concat(values, ' '))
  return allowed
end
