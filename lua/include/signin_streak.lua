-- Shared by the sign-in scripts (included by build.rs): streaks from monthly bitmaps, the
-- freezes that keep them and the milestones they pay.
--
-- Bit day-1 of a month's bitmap is that day, in the user's own time zone; a day counts
-- for the streak when it was signed, repaired (its bit in the month's `made` bitmap too)
-- or kept by a freeze (its bit in the `frozen` bitmap too). A streak that covers a whole
-- month goes on into the one before. So that this never reads more than three months, the
-- streak hash remembers the run that ended on the last day of each month older than the
-- previous one (`run:<YYYYMM>`): repairs and freezes reach back at most 28 days, so a
-- month before the previous one no longer changes, while the previous month is always
-- read afresh. Streak hash fields:
--   run:<YYYYMM>  the run of counted days ending on that month's last day
--   longest       the longest streak ever
--   freezes       freezes held
--   joined        the first day signed (YYYYMMDD)
--   paid:<day>    for the streak that began on epoch day <day>: the length through which
--                 its milestones were paid and its freezes earned (once per streak, also
--                 when a repaired or frozen day lengthens it past one)

local function month_before(month)
  if month % 100 == 1 then
    return month - 100 + 11
  end
  return month - 1
end

local function days_in(month)
  local year, m = math.floor(month / 100), month % 100
  if m == 2 then
    if (year % 4 == 0 and year % 100 ~= 0) or year % 400 == 0 then
      return 29
    end
    return 28
  end
  if m == 4 or m == 6 or m == 9 or m == 11 then
    return 30
  end
  return 31
end

-- The context of a call: counted = {this month, previous, the month before} bitmap keys,
-- marks = {this month, previous} bitmap keys of the kind the script writes (made or
-- frozen; nil for a read), the streak hash, today's month YYYYMM, day and epoch day.
local function streak_context(counted, marks, streak, month, today, epoch)
  local months = {month}
  for i = 2, 4 do
    months[i] = month_before(months[i - 1])
  end
  return {counted = counted, marks = marks, streak = streak, months = months,
          today = today, epoch = epoch, prev_days = days_in(months[2])}
end

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

-- The month (1 this, 2 previous) and day of a day `offset` days from today (offset <= 0).
local function locate(c, offset)
  local day = c.today + offset
  if day >= 1 then
    return 1, day
  end
  return 2, c.prev_days + day
end

-- YYYYMMDD of a day `offset` days from today.
local function day_number_at(c, offset)
  local i, day = locate(c, offset)
  return c.months[i] * 100 + day
end

local function is_counted(c, offset)
  local i, day = locate(c, offset)
  return redis.call('GETBIT', c.counted[i], day - 1) == 1
end

-- Counts a day, marking it in the script's own bitmap (made or frozen) too.
local function count_day(c, offset, ttl)
  local i, day = locate(c, offset)
  redis.call('SETBIT', c.counted[i], day - 1, 1)
  redis.call('EXPIRE', c.counted[i], ttl)
  redis.call('SETBIT', c.marks[i], day - 1, 1)
  redis.call('EXPIRE', c.marks[i], ttl)
end

-- The run remembered for the end of a month (a field of the former layout, `through` and
-- `length`, stands for its month), nil when none is.
local function remembered_run(c, month)
  local run = redis.call('HGET', c.streak, 'run:' .. month)
  if run then
    return tonumber(run)
  end
  if redis.call('HGET', c.streak, 'through') == tostring(month) then
    return tonumber(redis.call('HGET', c.streak, 'length') or '0')
  end
  return nil
end

-- The run ending on the last day of month i (2 the previous, 3 the one before).
local function run_through(c, i)
  if i == 3 then
    local run = remembered_run(c, c.months[3])
    if run then
      return run
    end
    local width = days_in(c.months[3])
    run = run_ending_at(c.counted[3], width - 1)
    if run == width then
      run = run + (remembered_run(c, c.months[4]) or 0)
    end
    redis.call('HSET', c.streak, 'run:' .. c.months[3], run)
    return run
  end
  local run = run_ending_at(c.counted[2], c.prev_days - 1)
  if run == c.prev_days then
    run = run + run_through(c, 3)
  end
  return run
end

-- The run of counted days ending on the day `offset` days from today (0 if not counted).
local function streak_at(c, offset)
  local i, day = locate(c, offset)
  local run = run_ending_at(c.counted[i], day - 1)
  if run == day then
    run = run + run_through(c, i + 1)
  end
  return run
end

-- The missed days before today that the freezes held would cover: {days, streak before
-- them}; days = 0 when yesterday counts, or the gap is longer than the freezes held, or
-- no streak precedes it.
local function coverable_gap(c)
  if is_counted(c, -1) then
    return 0, 0
  end
  local held = tonumber(redis.call('HGET', c.streak, 'freezes') or '0')
  for gap = 1, held do
    if is_counted(c, -(gap + 1)) then
      return gap, streak_at(c, -(gap + 1))
    end
  end
  return 0, 0
end

-- The current streak: ending today when today counts, else yesterday, else before a gap
-- the freezes held will cover at the next sign-in.
local function current_streak(c)
  if is_counted(c, 0) then
    return streak_at(c, 0)
  end
  if is_counted(c, -1) then
    return streak_at(c, -1)
  end
  local gap, before = coverable_gap(c)
  if gap > 0 then
    return before + gap
  end
  return 0
end

local function note_longest(c, length)
  local longest = tonumber(redis.call('HGET', c.streak, 'longest') or '0')
  if length > longest then
    redis.call('HSET', c.streak, 'longest', length)
  end
end

-- A new streak begins: forget the streaks that ended more than a repair window ago (no
-- repair can join them to another any more) and the runs of months no script reads.
local function forget_old(c, start)
  for _, name in ipairs(redis.call('HKEYS', c.streak)) do
    local began = tonumber(string.match(name, '^paid:(%d+)$') or '')
    if began and began ~= start then
      local length = tonumber(redis.call('HGET', c.streak, name) or '0')
      if began + length + 30 < start then
        redis.call('HDEL', c.streak, name)
      end
    end
    local month = tonumber(string.match(name, '^run:(%d+)$') or '')
    if month and month < c.months[4] then
      redis.call('HDEL', c.streak, name)
    end
  end
end

-- Pays the milestones the streak ending `offset` days from today (of `length` days) has
-- passed and earns its freezes, once per streak: the streak is known by its first day.
-- milestones: "days:points,…" ascending; every, every_points: past the list, each multiple
-- of `every` pays `every_points`. Answers the bonus and the freezes earned.
local function reward(c, length, offset, milestones, every, every_points, freezes_max)
  note_longest(c, length)
  if length <= 0 then
    return 0, 0
  end
  local start = c.epoch + offset - length + 1
  local field = 'paid:' .. start
  local paid = tonumber(redis.call('HGET', c.streak, field) or '0')
  if length <= paid then
    return 0, 0
  end
  if paid == 0 then
    forget_old(c, start)
  end
  local bonus = 0
  for rule in string.gmatch(milestones, '[^,]+') do
    local at, points = string.match(rule, '(%d+):(%d+)')
    at = tonumber(at)
    if at > paid and at <= length then
      bonus = bonus + tonumber(points)
    end
  end
  if every > 0 then
    local multiple = math.max(2, math.floor(paid / every) + 1)
    while multiple * every <= length do
      bonus = bonus + every_points
      multiple = multiple + 1
    end
  end
  local held = tonumber(redis.call('HGET', c.streak, 'freezes') or '0')
  local earned = math.floor(length / 7) - math.floor(paid / 7)
  local now_held = math.max(held, math.min(freezes_max, held + earned))
  redis.call('HSET', c.streak, field, length, 'freezes', now_held)
  return bonus, now_held - held
end
