--[[
  Sets or moves a topic's count of dead jobs (those in SQL's dead_job not requeued): a
  requeue lowers it, a rebuild sets it to what SQL counts. A death raises it in
  jobs_finish.lua, with the job's removal.

  Input:
    KEYS[1] counts: topic counters hash   {jobs:<topic>}:counts
    ARGV[1] mode: add | set
    ARGV[2] n: how many (add: may be negative)

  Output: the count after the call
]]
if ARGV[1] == 'set' then
  redis.call('HSET', KEYS[1], 'dead', ARGV[2])
  return tonumber(ARGV[2])
end
local count = redis.call('HINCRBY', KEYS[1], 'dead', ARGV[2])
if count < 0 then
  redis.call('HSET', KEYS[1], 'dead', 0)
  return 0
end
return count
