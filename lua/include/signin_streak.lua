-- Shared by the sign-in scripts (included by build.rs): streaks from monthly bitmaps.
--
-- Bit day-1 of a month's bitmap is that day. A streak that covers a whole month goes on
-- into the one before; so that this never needs more than two bitmaps, each sign-in
-- records in the streak hash the length of the streak that ended on the last day of the
-- previous month ({through = YYYYMM, length = n}).

-- Consecutive set bits ending at bit `last` (0-based), counted backwards.
local function run_ending_at(key, last)
  if last < 0 then
    return 0
  end
  local width = last + 1
  local value = redis.call('BITFIELD', key, 'GET', 'u' .. width, 0)[1]
  local run = 0
  while run < width and value % 2 == 1 do
    run = run + 1
    value = math.floor(value / 2)
  end
  return run
end

-- The streak that ended on the last day of the previous month, remembered in streak_key.
local function streak_through_previous(prev_key, streak_key, prev_days, prev_month, prev_prev_month)
  if redis.call('HGET', streak_key, 'through') == prev_month then
    return tonumber(redis.call('HGET', streak_key, 'length'))
  end
  local run = run_ending_at(prev_key, prev_days - 1)
  if run == prev_days and redis.call('HGET', streak_key, 'through') == prev_prev_month then
    run = run + tonumber(redis.call('HGET', streak_key, 'length') or '0')
  end
  redis.call('HSET', streak_key, 'through', prev_month, 'length', run)
  return run
end

-- The streak ending on `day` of this month (day 0: the last day of the previous month).
local function streak_ending(this_key, prev_key, streak_key, day, prev_days, prev_month, prev_prev_month)
  local before = streak_through_previous(prev_key, streak_key, prev_days, prev_month, prev_prev_month)
  if day == 0 then
    return before
  end
  local run = run_ending_at(this_key, day - 1)
  if run < day then
    return run
  end
  return run + before
end
