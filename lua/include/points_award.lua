-- Shared by the points scripts (included by build.rs): awards points within a daily cap,
-- adds them to the season board, XADDs the award and PUBLISHes the board's change.
--
-- Board score = points * 2^22 + (2^22 - 1 - seconds since the season began): more points
-- rank higher, and of equal points whoever reached them first ranks higher. A month has
-- fewer than 2^22 seconds; scores stay exact doubles up to 2^31 points (src/points/board.rs).
local SCORE_TIME_UNIT = 4194304

local function award(daily_key, board_key, stream_key, user, kind, requested, cap, now_ms,
                     season_seconds, season, channel, idempotency, day_ttl)
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
    redis.call('XADD', stream_key, '*', 'user', user, 'type', kind, 'points', allowed,
      'requested', requested, 'key', idempotency, 'season', season, 'at', now_ms)
    redis.call('PUBLISH', channel, user)
  end
  return allowed
end
