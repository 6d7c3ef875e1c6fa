--[[
  Adds a delayed job (seed 002: job pool + delay bucket).

  Input:
    KEYS[1] job pool hash    {jobs:<topic>}:pool   fields <id> (JSON), <id>/attempts,
                                                   <id>/error, <id>/lease, <id>/status
    KEYS[2] delay zset       {jobs:<topic>}:delayed   score = run at, epoch ms
    ARGV[1] job id   ARGV[2] job JSON   ARGV[3] run at, epoch ms

  Output: 1 added, -1 a job with this id exists (JOB_EXISTS)

  A job's own fields join its id and their name with '/', which no id may contain: with
  ':', allowed in ids, the job "a:attempts" and the attempts of the job "a" were one field.
]]
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return -1
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], ARGV[1] .. '/attempts', 0)
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1
