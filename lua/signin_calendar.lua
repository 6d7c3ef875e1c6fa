--[[
  Reads a month of a user's sign-ins, with the user's current streak.

  Input:
    KEYS[1] shown: the shown month's bitmap
    KEYS[2] this_month: this month's bitmap
    KEYS[3] previous_month: the previous month's bitmap
    KEYS[4] streak: streak hash
    KEYS[5] make_ups: the shown month's make-up counter
    ARGV[1] days: days of the shown month to read (up to today for this month)
    ARGV[2] today: today's day of month
    ARGV[3] previous_month_days: days in the previous month
    ARGV[4] previous_month: previous month YYYYMM
    ARGV[5] month_before: the month before it YYYYMM

  Output: { bits of the shown days (day 1 most significant), streak, make-ups used,
            signed today (0/1) }

  The streak ends today if today is signed, else yesterday (a streak is not broken until
  a day passes unsigned). Not read-only: it may record the previous month's streak
  (see signin_streak.lua).
]]
-- @include signin_streak.lua

local days = tonumber(ARGV[1])
local bits = redis.call('BITFIELD', KEYS[1], 'GET', 'u' .. days, 0)[1]
local today = tonumber(ARGV[2])
local signed_today = redis.call('GETBIT', KEYS[2], today - 1)
local end_day = today
if signed_today == 0 then
  end_day = today - 1
end
local streak = streak_ending(KEYS[2], KEYS[3], KEYS[4], end_day, tonumber(ARGV[3]), ARGV[4], ARGV[5])
return {bits, streak, tonumber(redis.call('GET', KEYS[5]) or '0'), signed_today}
