-- Shared by the points scripts (included by build.rs): awards points within a daily cap,
-- adds them to the season board, XADDs the award and PUBLISHes the board's change.
--
-- Board score = points * 2^22 + (2^22 - 1 - seconds since the season began): more points
-- rank higher, and of equal points whoever reached them first ranks higher. A month has
-- fewer than 2^22 seconds; scores stay exact doubles up to 2^31 points (src/features/leaderboard/mod.rs).
local SCORE_TIME_UNIT = 4194304

-- While `engage rebuild` rewrites the points from SQL, it holds awards back: the scripts
-- answer HELD (first reply element) without writing, and the server tries again shortly
-- (src/features/points/recovery.rs).
local HELD = -9
local function held(hold_key)
  return redis.call('EXISTS', hold_key) == 1
end

--
-- Every decision is XADDed, a zero award too: SQL then knows each idempotency key that was
-- used, and each sign-in. `extra` (optional) is a list of more field/value pairs.
local function award(daily_key, board_key, stream_key, user, kind, requested, cap, now_ms,
                     season_seconds, season, channel, idempotency, day_ttl, extra)
  local allowed = requested
  if cap >= 0 then
    local today = tonumber(redis.call('HGET', daily_key, kind) or '0')
    allowed = math.max(0, math.min(requested, cap - today))
  end
  if allowed > 0 then
    redis.call('HINCRBY', daily_key, kind, allowed)
    redis.call('EXPIRE', daily_key, day_ttl)
    local score = tonumber(redis.call('ZSCORE', board_key, user) or '0')
    local points = math.floor(score / SCORE_TIME_UNIT) + allowed
    local tie = SCORE_TIME_UNIT - 1 - season_seconds
    redis.call('ZADD', board_key, string.format('%.0f', points * SCORE_TIME_UNIT + tie), user)
    redis.call('PUBLISH', channel, user)
  end
  redis.call('XADD', stream_key, '*', 'user', user, 'type', kind, 'points', allowed,
    'requested', requested, 'key', idempotency, 'season', season, 'at', now_ms,
    unpack(extra or {}))
  return allowed
end
