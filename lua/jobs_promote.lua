--[[
  Moves due jobs of a topic to its waiting zset, and jobs whose visibility deadline passed
  (their worker died or hung: a stall) back to the front of their priority there. A stall
  does not use one of the job's attempts (the delivery never reported back); it is counted
  in the job's `stalls`, and the taker buries a job that stalled more often than its topic
  allows. Atomic, so every instance may run it on every tick without a lock and no job moves
  twice.

  Waiting jobs are taken lowest score first: score = (1000 - priority) * 2^43 + due time (ms),
  so a higher priority first, then the earlier due time; both exact in a double until the
  year 2248. A ready list of an earlier version (a plain FIFO) is moved in, due now.

  Input:
    KEYS[1] delayed: delay zset        {jobs:<topic>}:delayed
    KEYS[2] waiting: waiting zset      {jobs:<topic>}:waiting   score as above
    KEYS[3] legacy: ready list         {jobs:<topic>}:ready     of an earlier version, emptied
    KEYS[4] running: in-flight zset    {jobs:<topic>}:running   score = visibility deadline, ms
    KEYS[5] jobs: a job's hash is this and its id   {jobs:<topic>}:job:   (its priority)
    KEYS[6] counts: topic counters hash {jobs:<topic>}:counts     prioritised: whether jobs'
                                                   priorities are read at all (most topics
                                                   never set one; a read is a call a job)
    ARGV[1] now_ms: now, epoch ms
    ARGV[2] limit: most jobs to move
    ARGV[3] channel: the topic's live channel   {jobs:<topic>}:live   each change PUBLISHes the job id
    ARGV[4] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node
    ARGV[5] revisit_ms: how soon a topic with jobs waiting is visited again, ms (the
                        instance that promoted them takes them until none is left; the
                        visit tells the others, and a restarted one, that they wait)

  Output: { promoted, reclaimed, waiting jobs, next visit, run-at of each promoted
            job... }; next visit = when the topic needs promoting again: the earliest due
            time or visibility deadline, and no later than revisit_ms from now while jobs
            are waiting; -1 when it has no pending job at all (the caller drops it from the
            index of due topics)
]]
-- @include jobs_fields.lua
local live = listened(ARGV[3], ARGV[4])
local now = ARGV[1]
local BAND = 8796093022208
local prioritised = redis.call('HGET', KEYS[6], 'prioritised') == '1'
local function score(priority, due)
  return (1000 - (tonumber(priority) or 0)) * BAND + due
end
local function priority_of(id)
  return prioritised and redis.call('HGET', KEYS[5] .. id, 'priority')
end
local function wait(id, due)
  redis.call('ZADD', KEYS[2], score(priority_of(id), due), id)
  if live then redis.call(ARGV[4], ARGV[3], id) end
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  for _, id in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
    wait(id, tonumber(now))
  end
  redis.call('DEL', KEYS[3])
end
-- The due jobs are the delay zset's first ranks (every score up to now): read, they are
-- removed by rank, and added to the waiting zset in slices.
-- Ranks and limits given as text (count_text).
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', '0', ARGV[2])
local out = {0, 0, 0, -1}
local waiting = {}
for i = 1, #due, 2 do
  waiting[#waiting + 1] = score(priority_of(due[i]), tonumber(due[i + 1]))
  waiting[#waiting + 1] = due[i]
  if live then redis.call(ARGV[4], ARGV[3], due[i]) end
  out[#out + 1] = due[i + 1]
end
if #due > 0 then
  call_sliced('ZADD', KEYS[2], waiting, 2)
  redis.call('ZREMRANGEBYRANK', KEYS[1], '0', count_text(#due / 2 - 1))
end
out[1] = #due / 2
local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', '0', ARGV[2])
for _, id in ipairs(expired) do
  local key = KEYS[5] .. id
  redis.call('ZREM', KEYS[4], id)
  -- The stalled delivery's event (its take wrote none; see ran_event).
  local held = redis.call('HMGET', key, 'started', 'attempts', 'history')
  redis.call('HSET', key, 'history',
    history_with(held[3], 1, ran_event(held[1] or now, held[2])))
  redis.call('HDEL', key, 'lease')
  redis.call('HINCRBY', key, 'stalls', 1)
  redis.call('HINCRBY', key, 'attempts', -1)
  wait(id, 0)
end
out[2] = #expired
out[3] = redis.call('ZCARD', KEYS[2])
for _, key in ipairs({KEYS[1], KEYS[4]}) do
  local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
  if first[2] and (out[4] == -1 or tonumber(first[2]) < out[4]) then
    out[4] = tonumber(first[2])
  end
end
if out[3] > 0 then
  local revisit = tonumber(now) + tonumber(ARGV[5])
  if out[4] == -1 or revisit < out[4] then
    out[4] = revisit
  end
end
return out
