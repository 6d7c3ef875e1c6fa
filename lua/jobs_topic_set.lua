--[[
  Writes a topic's settings, as SQL's job_topic row holds them: whether it is paused and its
  limits. The take script reads them (jobs_take.lua). Called after SQL committed the row, and
  by a rebuild. '-' leaves a setting as it is, so that a pause and a change of limits at once
  never write back each other's old value.

  Input:
    KEYS[1] settings: topic settings hash   {jobs:<topic>}:settings
    ARGV[1] paused: 1 paused, 0 not, - unchanged
    ARGV[2] per_second: most jobs started per second, '' no limit, - unchanged
    ARGV[3] concurrency: most jobs in flight at once, '' no limit, - unchanged

  Output: 1
]]
local fields = {'paused', 'per_second', 'concurrency'}
for i, field in ipairs(fields) do
  local value = ARGV[i]
  if value == '' or (i == 1 and value == '0') then
    redis.call('HDEL', KEYS[1], field)
  elseif value ~= '-' then
    redis.call('HSET', KEYS[1], field, value)
  end
end
return 1
