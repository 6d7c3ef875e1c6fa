--[[
  Moves the visibility deadline of a delivery that is still running, so that a handler
  longer than the visibility timeout keeps its job. Only the delivery holding the lease may:
  a job cancelled or reclaimed meanwhile is not touched.

  Input:
    KEYS[1] running: in-flight zset   {jobs:<topic>}:running   score = visibility deadline, ms
    KEYS[2] job: the job's hash     {jobs:<topic>}:job:<id>
    ARGV[1] deadline_ms: new deadline, epoch ms
    ARGV[2] id: job id
    ARGV[3] lease: lease token

  Output: 1 extended, 0 the lease is no longer this delivery's
]]
if ARGV[3] == '' or redis.call('HGET', KEYS[2], 'lease') ~= ARGV[3] then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', ARGV[1], ARGV[2])
return 1
