--[[
  Signs a user in for today (the user's day): covers a gap before today with the freezes
  held, sets the day's bit, and on the first sign-in of the day computes the streak, pays
  SIGN_IN points with the bonus of each milestone the streak passed (once per streak) and
  earns its freezes.

  Input:
    KEYS[1] this_month: this month's bitmap      {points:B}:sign:<user>:<YYYYMM>
    KEYS[2] previous_month: previous month's bitmap  {points:B}:sign:<user>:<YYYYMM-1>
    KEYS[3] month_before: the month before's bitmap  {points:B}:sign:<user>:<YYYYMM-2>
    KEYS[4] streak: streak hash              {points:B}:streak:<user>
    KEYS[5] frozen_this: this month's frozen days     {points:B}:frozen:<user>:<YYYYMM>
    KEYS[6] frozen_previous: the previous month's frozen days
    KEYS[7] daily: today's points hash      {points:B}:daily:<user>:<YYYYMMDD>
    KEYS[8] board: season board             {points:B}:board:<YYYYMM>
    KEYS[9] events: points stream            {points:B}:events
    KEYS[10] hold: rebuild hold             {points:B}:rebuilding
    KEYS[11] changes: the board's changes      {points:B}:board:<YYYYMM>:changes
    KEYS[12] balances: the bucket's points balances {points:B}:balances
    KEYS[13] removed: the users removed from the board {points:B}:board:<YYYYMM>:removed
    KEYS[14] zone: the user's zone hash     {points:B}:zone:<user>
    ARGV[1] user: user id
    ARGV[2] month: the user's month YYYYMM
    ARGV[3] day: the user's day of month (1..31)
    ARGV[4] epoch_day: the user's day, days since 1970-01-01
    ARGV[5] now_ms: now, epoch ms
    ARGV[6] season_seconds: seconds since the season began
    ARGV[7] season: season id
    ARGV[8] channel: board channel
    ARGV[9] daily_ttl_seconds: daily hash TTL seconds
    ARGV[10] bitmap_ttl_seconds: bitmap TTL seconds
    ARGV[11] base_points: base points
    ARGV[12] milestones: milestones "days:points,..." e.g. "7:10,14:20,30:40"
    ARGV[13] every: past the milestones, each multiple of this pays (the last milestone)
    ARGV[14] every_points: what each such multiple pays
    ARGV[15] freezes_max: freezes a user may hold
    ARGV[16] idempotency: idempotency text for the event (signin:<user>:<date>)
    ARGV[17] day_number: today, YYYYMMDD (the sign_ins row the archive writes from the event)
    ARGV[18] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node
    ARGV[19] award_day: the user's today, YYYYMMDD (the day of the daily points hash)
    ARGV[20] zone: the zone the caller counted the day in, to record as the user's first
                   ('' when the user's zone is recorded already)
    ARGV[21] zone_previous: the zone before it ('' for none), as lua/signin_set_zone.lua
    ARGV[22] zone_from: first day counted in the zone, YYYYMMDD (0: always)
    ARGV[23] zone_changed_ms: when it took effect, epoch ms

  Output: { status, streak, points_awarded, days_frozen }
    status (lua/include/status.lua) OK signed, ALREADY signed today before, HELD while a
           rebuild holds sign-ins back, MOVED the caller asked to record the user's first
           zone and a zone is recorded meanwhile (read it, and sign in that zone's day)

  Events: the award's AwardEvent carries the sign-in's `day`, `made_up`, `frozen`, `earned`,
  and `streak` with the milestone `bonus` it paid (0: none), which notifications read
  (MILESTONE_REACHED); and the zone it recorded as the user's first, if it did (`zone`,
  `zone_previous`, `zone_from`, `zone_changed_ms`), which the archive writes to
  sign_in_zones. The first sign-in's zone is recorded here, with the day it signs, rather
  than by the caller in SQL first: the record costs a field write, not three statements in
  the request.

  A gap of missed days right before today is covered when the freezes held reach across
  it and a streak precedes it: each day is counted and marked frozen, one freeze used per
  day. The script runs alone, so two instances signing the same user at once cover a gap
  once: the second finds today signed (ALREADY) or the gap's days counted.
]]
-- @include status.lua
-- @include points_award.lua
-- @include signin_streak.lua

if held(KEYS[10]) then
  return {HELD, 0, 0, 0}
end
local records_zone = ARGV[20] ~= ''
if records_zone and redis.call('EXISTS', KEYS[14]) == 1 then
  return {MOVED, 0, 0, 0}
end

local c = streak_context({KEYS[1], KEYS[2], KEYS[3]}, {KEYS[5], KEYS[6]}, KEYS[4],
  tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))
local ttl = ARGV[10]
if is_counted(c, 0) then
  return {ALREADY, streak_at(c, 0), 0, 0}
end

local frozen = {}
local gap = coverable_gap(c)
if gap > 0 then
  for offset = -gap, -1 do
    count_day(c, offset, ttl)
    frozen[#frozen + 1] = day_number_at(c, offset)
  end
  redis.call('HINCRBY', KEYS[4], 'freezes', -gap)
end

redis.call('SETBIT', KEYS[1], c.today - 1, 1)
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('HSETNX', KEYS[4], 'joined', ARGV[17])
local streak = streak_at(c, 0)
local bonus, earned = reward(c, streak, 0, ARGV[12], tonumber(ARGV[13]), tonumber(ARGV[14]),
  tonumber(ARGV[15]))
local frozen_days = '-'
if #frozen > 0 then
  frozen_days = table.concat(frozen, ',')
end
local fields = {'day', ARGV[17], 'made_up', 0, 'frozen', frozen_days, 'earned', earned,
  'streak', streak, 'bonus', bonus}
if records_zone then
  redis.call('HSET', KEYS[14], 'zone', ARGV[20], 'previous', ARGV[21], 'from', ARGV[22],
    'changed_ms', ARGV[23])
  for _, field in ipairs({'zone', ARGV[20], 'zone_previous', ARGV[21], 'zone_from', ARGV[22],
    'zone_changed_ms', ARGV[23]}) do
    fields[#fields + 1] = field
  end
end
local awarded = award(KEYS[7], KEYS[12], KEYS[8], KEYS[13], KEYS[9], ARGV[1], 'SIGN_IN', tonumber(ARGV[11]) + bonus,
  -1, ARGV[5], tonumber(ARGV[6]), ARGV[7], {ARGV[18], ARGV[8], KEYS[11]}, ARGV[16], ARGV[9],
  ARGV[19], fields)
return {OK, streak, awarded, #frozen}
