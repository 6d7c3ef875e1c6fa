--[[
  Reads a user's streak as of the user's today.

  Input:
    KEYS[1] this_month: this month's bitmap
    KEYS[2] previous_month: the previous month's bitmap
    KEYS[3] month_before: the month before's bitmap
    KEYS[4] streak: streak hash
    KEYS[5] make_ups: this month's repair counter
    ARGV[1] month: the user's month YYYYMM
    ARGV[2] day: the user's day of month
    ARGV[3] epoch_day: the user's day, days since 1970-01-01

  Output: { signed today (0/1), current streak, longest, freezes held, joined (YYYYMMDD,
            0 before the first sign-in), repairs used this month }

  The current streak ends today if today counts, else yesterday, else before a gap that
  the freezes held will cover at the next sign-in (see signin_sign.lua). Not read-only: it
  may remember the run of a month before the previous one (see signin_streak.lua).
]]
-- @include signin_streak.lua

local c = streak_context({KEYS[1], KEYS[2], KEYS[3]}, nil, KEYS[4], tonumber(ARGV[1]),
  tonumber(ARGV[2]), tonumber(ARGV[3]))
local signed = 0
if is_counted(c, 0) then
  signed = 1
end
local current = current_streak(c)
local longest = math.max(current, tonumber(redis.call('HGET', KEYS[4], 'longest') or '0'))
return {signed, current, longest, tonumber(redis.call('HGET', KEYS[4], 'freezes') or '0'),
  tonumber(redis.call('HGET', KEYS[4], 'joined') or '0'),
  tonumber(redis.call('GET', KEYS[5]) or '0')}
