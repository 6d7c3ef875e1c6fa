--[[
  Records that topics have work due at a time: each topic's visit in the index of due topics
  moves earlier (never later), and the topic gets a new mark, so that a promotion that read
  the index before this write does not move the topic later on what it saw (see
  jobs_reindex.lua). Called after a job reached its topic's keys, never before.

  Input:
    KEYS[1] due: zset       {jobs}:due        member = topic, score = next visit, epoch ms
    KEYS[2] marks: hash     {jobs}:marks      topic -> mark of the latest write
    KEYS[3] mark: counter   {jobs}:mark       marks are never reused, so a topic dropped and
                                             indexed again never shows an old mark
    KEYS[4] known: set      {jobs}:known      every topic that had a job (`topics` lists it)
    ARGV[1..] topics: two per topic: topic, due at (epoch ms)

  Output: 0
]]
for i = 1, #ARGV, 2 do
  local mark = redis.call('INCR', KEYS[3])
  redis.call('ZADD', KEYS[1], 'LT', ARGV[i + 1], ARGV[i])
  redis.call('HSET', KEYS[2], ARGV[i], mark)
  redis.call('SADD', KEYS[4], ARGV[i])
end
return 0
