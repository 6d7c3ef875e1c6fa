--[[
  After a promotion walked due topics: moves each to its next visit, or drops it when it has
  no pending job, unless its mark changed since the walk read the index. A changed mark
  means a job was added meanwhile (jobs_index.lua), which the walk may not have seen: the
  topic then keeps its visit (at most the new job's due time) and is walked again.

  Input:
    KEYS[1] due: zset   {jobs}:due
    KEYS[2] marks: hash   {jobs}:marks
    ARGV[1..] topics: three per topic: topic, mark the walk read ('' none), next visit (epoch ms;
                               -1 = nothing pending)

  Output: how many topics were moved or dropped
]]
local moved = 0
for i = 1, #ARGV, 3 do
  local topic, next = ARGV[i], tonumber(ARGV[i + 2])
  if (redis.call('HGET', KEYS[2], topic) or '') == ARGV[i + 1] then
    if next < 0 then
      redis.call('ZREM', KEYS[1], topic)
      redis.call('HDEL', KEYS[2], topic)
    else
      redis.call('ZADD', KEYS[1], next, topic)
    end
    moved = moved + 1
  end
end
return moved
