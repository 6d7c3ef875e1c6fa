--[[
  Moves a delayed job's due time: earlier (promoteJob: now) or later (changeJobDelay). Only a
  delayed job moves; one that is waiting, running or ended is left alone.

  Input:
    KEYS[1] delayed: delay zset        {jobs:<topic>}:delayed
    KEYS[2] job: the job's hash       {jobs:<topic>}:job:<id>
    ARGV[1] id: job id
    ARGV[2] run_at_ms: new due time, epoch ms
    ARGV[3] channel: the topic's live channel   {jobs:<topic>}:live   each change PUBLISHes the job id
    ARGV[4] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node

  Output: {1, <the job's JSON>} moved (its seq names its SQL row), {0, ''} not delayed
]]
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {0, ''}
end
redis.call('ZADD', KEYS[1], 'XX', ARGV[2], ARGV[1])
redis.call(ARGV[4], ARGV[3], ARGV[1])
return {1, redis.call('HGET', KEYS[2], 'job') or ''}
