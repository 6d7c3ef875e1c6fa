--[[
  Cancels a job wherever it is: delayed, ready or in flight. An in-flight delivery loses its
  lease, so its completion afterwards changes nothing. The id may be scheduled again.

  Input:
    KEYS[1] delayed: delay zset
    KEYS[2] waiting: waiting zset
    KEYS[3] running: in-flight zset
    KEYS[4] job: the job's hash        {jobs:<topic>}:job:<id>
    KEYS[5] finished: finished zset
    KEYS[6] legacy: ready list of an earlier version (jobs_promote.lua empties it)
    ARGV[1] id: job id
    ARGV[2] now_ms: now, epoch ms
    ARGV[3] channel: the topic's live channel   {jobs:<topic>}:live   each change PUBLISHes the job id
    ARGV[4] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node

  Output: {1, <JSON of the job>, pending} cancelled (its JSON tells the caller which SQL
          record to remove; pending = 0 when the topic has no job left delayed, waiting or
          running, so its visit may come now and drop it from the index of due topics),
          {0, '', 1} no such pending job (unknown, finished or already cancelled)
]]
-- @include jobs_fields.lua
local id = ARGV[1]
local running = redis.call('ZREM', KEYS[3], id)
local removed = redis.call('ZREM', KEYS[1], id)
  + redis.call('ZREM', KEYS[2], id)
  + redis.call('LREM', KEYS[6], 0, id)
  + running
if removed == 0 then
  return {0, '', 1}
end
local held = redis.call('HMGET', KEYS[4], 'job', 'attempts', 'history', 'started')
local cancelled = history_event(ARGV[2], 'CANCELLED', held[2], '')
local history = running == 1
  and history_with(held[3], 2, ran_event(held[4] or ARGV[2], held[2]) .. ',' .. cancelled)
  or history_with(held[3], 1, cancelled)
redis.call('HDEL', KEYS[4], 'lease')
redis.call('HSET', KEYS[4], 'status', 'CANCELLED', 'finished', ARGV[2], 'history', history)
redis.call(ARGV[4], ARGV[3], id)
redis.call('ZADD', KEYS[5], ARGV[2], id)
return {1, held[1] or '', pending_in(KEYS[1], KEYS[2], KEYS[3], KEYS[6])}
