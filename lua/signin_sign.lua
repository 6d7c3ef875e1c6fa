--[[
  Signs a user in for today: sets the day's bit, and on the first sign-in of the day
  computes the streak and awards SIGN_IN points with the streak bonus.

  Input:
    KEYS[1] this_month: this month's bitmap      {points:B}:sign:<user>:<YYYYMM>
    KEYS[2] previous_month: previous month's bitmap  {points:B}:sign:<user>:<YYYYMM-1>
    KEYS[3] streak: streak hash              {points:B}:streak:<user>
    KEYS[4] daily: today's points hash      {points:B}:daily:<user>:<YYYYMMDD>
    KEYS[5] board: season board             {points:B}:board:<YYYYMM>
    KEYS[6] events: points stream            {points:B}:events
    KEYS[7] hold: rebuild hold             {points:B}:rebuilding
    KEYS[8] changes: the board's changes      {points:B}:board:<YYYYMM>:changes
    KEYS[9] balances: the bucket's points balances {points:B}:balances
    ARGV[1] user: user id
    ARGV[2] day: day of month (1..31)
    ARGV[3] previous_month_days: days in the previous month
    ARGV[4] previous_month: previous month YYYYMM
    ARGV[5] month_before: the month before it YYYYMM
    ARGV[6] now_ms: now, epoch ms
    ARGV[7] season_seconds: seconds since the season began
    ARGV[8] season: season id
    ARGV[9] channel: board channel
    ARGV[10] daily_ttl_seconds: daily hash TTL seconds
    ARGV[11] bitmap_ttl_seconds: bitmap TTL seconds
    ARGV[12] base_points: base points
    ARGV[13] bonuses: bonuses "streak:points,..." e.g. "7:10,14:20,28:40"
    ARGV[14] idempotency: idempotency text for the event (signin:<user>:<date>)
    ARGV[15] day_number: today, YYYYMMDD (the sign_ins row the archive writes from the event)
    ARGV[16] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node

  Output: { status, streak, points_awarded }
    status (lua/include/status.lua) OK signed, ALREADY signed today before, HELD while a
           rebuild holds sign-ins back
]]
-- @include status.lua
-- @include points_award.lua
-- @include signin_streak.lua

if held(KEYS[7]) then
  return {HELD, 0, 0}
end

local day = tonumber(ARGV[2])
local was = redis.call('SETBIT', KEYS[1], day - 1, 1)
redis.call('EXPIRE', KEYS[1], ARGV[11])
local streak = streak_ending(KEYS[1], KEYS[2], KEYS[3], day, tonumber(ARGV[3]), ARGV[4], ARGV[5])
if was == 1 then
  return {ALREADY, streak, 0}
end
local points = tonumber(ARGV[12])
for rule in string.gmatch(ARGV[13], '[^,]+') do
  local at, bonus = string.match(rule, '(%d+):(%d+)')
  if tonumber(at) == streak then
    points = points + tonumber(bonus)
  end
end
local awarded = award(KEYS[4], KEYS[9], KEYS[5], KEYS[6], ARGV[1], 'SIGN_IN', points, -1, ARGV[6],
  tonumber(ARGV[7]), ARGV[8], {ARGV[16], ARGV[9], KEYS[8]}, ARGV[14], ARGV[10], {'day', ARGV[15], 'made_up', 0})
return {OK, streak, awarded}
