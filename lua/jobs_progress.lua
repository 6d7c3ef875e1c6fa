--[[
  Records a running job's progress, for the delivery that holds its lease only: a delivery
  whose lease ran out, or a job cancelled meanwhile, cannot write over a newer one's.

  Input:
    KEYS[1] job: the job's hash    {jobs:<topic>}:job:<id>   lease, progress
    ARGV[1] id: job id
    ARGV[2] lease: the delivery's lease token (X-Engage-Lease of its callback)
    ARGV[3] progress: JSON text
    ARGV[4] channel: the topic's live channel   {jobs:<topic>}:live   each change PUBLISHes the job id
    ARGV[5] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node

  Output: 1 recorded, 0 the lease is not (or no longer) this delivery's
]]
if ARGV[2] == '' or redis.call('HGET', KEYS[1], 'lease') ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'progress', ARGV[3])
redis.call(ARGV[5], ARGV[4], ARGV[1])
return 1
