--[[
  Repairs a missed day among the last days (`repairDay`, and `makeUpSignIn` for a day of
  this month): counts it, marks it made up, counts the repair in this month's allowance,
  pays the base point, and the bonus of each milestone the current streak passed by it
  (once per streak), with the freezes it earned.

  Input:
    KEYS[1] this_month: this month's bitmap      {points:B}:sign:<user>:<YYYYMM>
    KEYS[2] previous_month: previous month's bitmap
    KEYS[3] month_before: the month before's bitmap
    KEYS[4] streak: streak hash              {points:B}:streak:<user>
    KEYS[5] made_this: this month's repaired days  {points:B}:made:<user>:<YYYYMM>
    KEYS[6] made_previous: the previous month's repaired days
    KEYS[7] make_ups: this month's repair counter {points:B}:makeups:<user>:<YYYYMM>
    KEYS[8] daily: today's points hash      {points:B}:daily:<user>:<YYYYMMDD>
    KEYS[9] board: season board             {points:B}:board:<YYYYMM>
    KEYS[10] events: points stream            {points:B}:events
    KEYS[11] hold: rebuild hold             {points:B}:rebuilding
    KEYS[12] changes: the board's changes      {points:B}:board:<YYYYMM>:changes
    KEYS[13] balances: the bucket's points balances {points:B}:balances
    KEYS[14] removed: the users removed from the board {points:B}:board:<YYYYMM>:removed
    ARGV[1] user: user id
    ARGV[2] month: the user's month YYYYMM
    ARGV[3] day: the user's day of month (1..31)
    ARGV[4] epoch_day: the user's day, days since 1970-01-01
    ARGV[5] offset: the repaired day, days from today (negative, at most 28 back)
    ARGV[6] allowed: repairs allowed this month
    ARGV[7] counter_ttl_seconds: counter TTL seconds
    ARGV[8] now_ms: now, epoch ms
    ARGV[9] season_seconds: seconds since the season began
    ARGV[10] season: season id
    ARGV[11] channel: board channel
    ARGV[12] daily_ttl_seconds: daily hash TTL seconds
    ARGV[13] bitmap_ttl_seconds: bitmap TTL seconds
    ARGV[14] base_points: base points
    ARGV[15] milestones: milestones "days:points,..."
    ARGV[16] every: past the milestones, each multiple of this pays
    ARGV[17] every_points: what each such multiple pays
    ARGV[18] freezes_max: freezes a user may hold
    ARGV[19] idempotency: idempotency text for the event (makeup:<user>:<date>)
    ARGV[20] day_number: the repaired day, YYYYMMDD
    ARGV[21] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node
    ARGV[22] make_up: 1 for a make-up (deprecated): it may sign a day before the first
             one (which becomes the first), and pays the base point only (a milestone it
             passes is paid by the next sign-in); 0 for a repair
    ARGV[23] award_day: the user's today, YYYYMMDD (the day of the daily points hash)

  Output: { status, streak, points_awarded, repairs_left }
    status (lua/include/status.lua) OK repaired, ALREADY the day counts already, NOT_YET
           the day is before the user's first sign-in, OVER_LIMIT no repairs left this
           month, HELD while a rebuild holds repairs back

  Events: the award's AwardEvent carries the repair's `day`, `made_up`, `frozen`, `earned`,
  and `streak` with the milestone `bonus` it paid (0: none), as lua/signin_sign.lua's does.
]]
-- @include status.lua
-- @include points_award.lua
-- @include signin_streak.lua

if held(KEYS[11]) then
  return {HELD, 0, 0, 0}
end

local c = streak_context({KEYS[1], KEYS[2], KEYS[3]}, {KEYS[5], KEYS[6]}, KEYS[4],
  tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))
local offset = tonumber(ARGV[5])
local allowed = tonumber(ARGV[6])
local used = tonumber(redis.call('GET', KEYS[7]) or '0')
if is_counted(c, offset) then
  return {ALREADY, current_streak(c), 0, math.max(0, allowed - used)}
end
local make_up = ARGV[22] == '1'
local joined = redis.call('HGET', KEYS[4], 'joined')
if not make_up and (not joined or tonumber(ARGV[20]) < tonumber(joined)) then
  return {NOT_YET, current_streak(c), 0, math.max(0, allowed - used)}
end
if used >= allowed then
  return {OVER_LIMIT, current_streak(c), 0, 0}
end
count_day(c, offset, ARGV[13])
redis.call('INCR', KEYS[7])
redis.call('EXPIRE', KEYS[7], ARGV[7])
if make_up and (not joined or tonumber(ARGV[20]) < tonumber(joined)) then
  redis.call('HSET', KEYS[4], 'joined', ARGV[20])
end

-- The run the repaired day is part of now: the longest may be it.
local last = offset
while last < 0 and is_counted(c, last + 1) do
  last = last + 1
end
local run = streak_at(c, last)
note_longest(c, run)
local bonus, earned = 0, 0
if not make_up and (last == 0 or (last == -1 and not is_counted(c, 0))) then
  bonus, earned = reward(c, run, last, ARGV[15], tonumber(ARGV[16]), tonumber(ARGV[17]),
    tonumber(ARGV[18]))
end
local awarded = award(KEYS[8], KEYS[13], KEYS[9], KEYS[14], KEYS[10], ARGV[1], 'SIGN_IN', tonumber(ARGV[14]) + bonus,
  -1, ARGV[8], tonumber(ARGV[9]), ARGV[10], {ARGV[21], ARGV[11], KEYS[12]}, ARGV[19], ARGV[12],
  ARGV[23], {'day', ARGV[20], 'made_up', 1, 'frozen', '-', 'earned', earned, 'streak', run,
   'bonus', bonus})
return {OK, current_streak(c), awarded, allowed - used - 1}
