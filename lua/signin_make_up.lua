--[[
  Makes up a missed day of this month: sets its bit, counts the make-up, awards the base
  point only (no streak bonus).

  Input:
    KEYS[1..6] this_month, previous_month, streak, daily, board, events: as signin_sign.lua
    KEYS[7] make_ups: make-up counter {points:B}:makeups:<user>:<YYYYMM>
    KEYS[8] hold: rebuild hold {points:B}:rebuilding
    KEYS[9] changes: the board's changes {points:B}:board:<YYYYMM>:changes
    KEYS[10] balances: the bucket's points balances {points:B}:balances
    ARGV[1] user: user id
    ARGV[2] day: the missed day (before today)
    ARGV[3] today: today's day
    ARGV[4] previous_month_days: days in the previous month
    ARGV[5] previous_month: previous month YYYYMM
    ARGV[6] month_before: the month before it YYYYMM
    ARGV[7] make_ups_allowed: make-ups allowed per month
    ARGV[8] now_ms: now, epoch ms
    ARGV[9] season_seconds: seconds since the season began
    ARGV[10] season: season id
    ARGV[11] channel: board channel
    ARGV[12] daily_ttl_seconds: daily hash TTL seconds
    ARGV[13] counter_ttl_seconds: counter TTL seconds
    ARGV[14] base_points: base points
    ARGV[15] idempotency: idempotency text for the event
    ARGV[16] day_number: the missed day, YYYYMMDD (the sign_ins row the archive writes from the event)
    ARGV[17] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node

  Output: { status, streak, points_awarded, make_ups_left }
    status (lua/include/status.lua) OK made up, ALREADY the day is signed already,
           OVER_LIMIT no make-ups left this month, HELD while a rebuild holds make-ups back
]]
-- @include status.lua
-- @include points_award.lua
-- @include signin_streak.lua

if held(KEYS[8]) then
  return {HELD, 0, 0, 0}
end

local day, today = tonumber(ARGV[2]), tonumber(ARGV[3])
local allowed = tonumber(ARGV[7])
local used = tonumber(redis.call('GET', KEYS[7]) or '0')
local function current_streak()
  local end_day = today
  if redis.call('GETBIT', KEYS[1], today - 1) == 0 then
    end_day = today - 1
  end
  return streak_ending(KEYS[1], KEYS[2], KEYS[3], end_day, tonumber(ARGV[4]), ARGV[5], ARGV[6])
end
if redis.call('GETBIT', KEYS[1], day - 1) == 1 then
  return {ALREADY, current_streak(), 0, math.max(0, allowed - used)}
end
if used >= allowed then
  return {OVER_LIMIT, current_streak(), 0, 0}
end
redis.call('SETBIT', KEYS[1], day - 1, 1)
redis.call('INCR', KEYS[7])
redis.call('EXPIRE', KEYS[7], ARGV[13])
local awarded = award(KEYS[4], KEYS[10], KEYS[5], KEYS[6], ARGV[1], 'SIGN_IN', tonumber(ARGV[14]), -1,
  ARGV[8], tonumber(ARGV[9]), ARGV[10], {ARGV[17], ARGV[11], KEYS[9]}, ARGV[15], ARGV[12],
  {'day', ARGV[16], 'made_up', 1})
return {OK, current_streak(), awarded, allowed - used - 1}
