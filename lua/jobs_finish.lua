--[[
  Ends deliveries of a topic, many per call: success, a retry later, or death (after the
  caller stored the job in the dead_job table). Only the delivery holding the lease may end
  a job: one cancelled or reclaimed meanwhile is not touched, so a late completion cannot
  resurrect it. Each end is an event of the job's history, after the delivery's own RUNNING
  event, which the take leaves to it (jobs_fields.lua, ran_event); a success keeps the
  result.

  A repeating job's run that ended (done, or dead after its attempts) schedules the next run
  here, in the same call that ends this one: the next run exists exactly when this one has
  ended, whichever instance ends it, so runs never overlap and none is lost or doubled. The
  job keeps its id, history and runs; its attempts start again from 0. The series ends
  (as a plain job would) when the caller gives no next run (past endsAt) or its runs reach
  the limit.

  Input:
    KEYS[1] running: in-flight zset
    KEYS[2] delayed: delay zset
    KEYS[3] jobs: a job's hash is this and its id   {jobs:<topic>}:job:
    KEYS[4] finished: finished zset    {jobs:<topic>}:finished   score = finish time, ms
    KEYS[5] counts: topic counters hash {jobs:<topic>}:counts     done, dead: jobs that
                                                   ended so (the caller stored a dead one in
                                                   dead_job)
    KEYS[6] waiting: waiting zset      {jobs:<topic>}:waiting
    ARGV[1] now_ms: now, epoch ms
    ARGV[2] keep: finished jobs kept per topic
    ARGV[3] channel: the topic's live channel   {jobs:<topic>}:live   each change PUBLISHes the job id
    ARGV[4] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node
    ARGV[5..] deliveries: per delivery, job id, lease token and outcome, then the
                                 outcome's own values: done (none), done+ (result: JSON or ''
                                 none; finished jobs to keep after this one: '' the topic's,
                                 else the job's removeOnComplete; next run of a repeating job:
                                 epoch ms or '' none; most runs of its series: '' no limit),
                                 next (a success with no result or keep of its own: next
                                 run; most runs), retry (retry at: epoch ms; error text),
                                 dead (error text; next run; most runs). A plain success is
                                 three values, a repeating one's five: each value of a call
                                 costs Redis about a third of a command called from a
                                 script.

  Output: { pending, then one per delivery, in order: 1 applied, 2 applied and the next
          run of the series scheduled, 0 the lease is no longer this delivery's };
          pending = 0 when the topic has no job left delayed, waiting or running (its
          visit may come now, to drop it from the index of due topics), 1 otherwise
]]
-- @include jobs_fields.lua
local live = listened(ARGV[3], ARGV[4])
local now, keep = ARGV[1], tonumber(ARGV[2])
local out = {1}
-- Gathered over the deliveries, written once each after them.
local ended, delayed, finished, forgotten, done, dead = {}, {}, {}, {}, 0, 0
local i = 5
while i <= #ARGV do
  local id, lease, outcome = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local retry_at, error_text, result, keep_after, next_run, limit = '', '', '', '', '', ''
  if outcome == 'done+' then
    outcome, result, keep_after, next_run, limit = 'done', ARGV[i + 3], ARGV[i + 4],
      ARGV[i + 5], ARGV[i + 6]
    i = i + 7
  elseif outcome == 'next' then
    outcome, next_run, limit = 'done', ARGV[i + 3], ARGV[i + 4]
    i = i + 5
  elseif outcome == 'retry' then
    retry_at, error_text = ARGV[i + 3], ARGV[i + 4]
    i = i + 5
  elseif outcome == 'dead' then
    error_text, next_run, limit = ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
    i = i + 6
  else
    i = i + 3
  end
  local key = KEYS[3] .. id
  local held = redis.call('HMGET', key, 'lease', 'attempts', 'runs', 'history', 'started')
  if held[1] ~= lease then
    out[#out + 1] = 0
  else
    ended[#ended + 1] = id
    local attempt = held[2]
    -- The delivery's own event first (the take wrote none), then how it ended.
    local ran = ran_event(held[5] or now, attempt)
    if outcome == 'retry' then
      redis.call('HSET', key, 'lease', '', 'error', error_text, 'history',
        history_with(held[4], 2,
          ran .. ',' .. history_event(now, 'DELAYED', attempt, error_text)))
      delayed[#delayed + 1] = retry_at
      delayed[#delayed + 1] = id
      out[#out + 1] = 1
    else
      -- A run ended: done, or dead (then dead_job holds it).
      local runs = (tonumber(held[3]) or 0) + 1
      local most = tonumber(limit)
      local again = next_run ~= '' and (most == nil or runs < most)
      local set = {'lease', '', 'stalls', '0', 'runs', count_text(runs), 'finished', now}
      local ending
      if outcome == 'dead' then
        dead = dead + 1
        set[#set + 1] = 'error'
        set[#set + 1] = error_text
        ending = history_event(now, 'DEAD', attempt, error_text)
      else
        done = done + 1
        if result ~= '' then
          set[#set + 1] = 'result'
          set[#set + 1] = result
        end
        ending = history_event(now, 'DONE', attempt, '')
      end
      local history
      if again then
        set[#set + 1] = 'attempts'
        set[#set + 1] = '0'
        history = history_with(held[4], 3,
          ran .. ',' .. ending .. ',' .. history_event(now, 'DELAYED', '0', ''))
        delayed[#delayed + 1] = next_run
        delayed[#delayed + 1] = id
        out[#out + 1] = 2
      elseif outcome == 'dead' then
        forgotten[#forgotten + 1] = id
        out[#out + 1] = 1
      else
        history = history_with(held[4], 2, ran .. ',' .. ending)
        set[#set + 1] = 'status'
        set[#set + 1] = 'DONE'
        finished[#finished + 1] = now
        finished[#finished + 1] = id
        if keep_after ~= '' then
          keep = math.min(keep, tonumber(keep_after))
        end
        out[#out + 1] = 1
      end
      if history then
        set[#set + 1] = 'history'
        set[#set + 1] = history
        redis.call('HSET', key, unpack(set))
      end
    end
    if live then redis.call(ARGV[4], ARGV[3], id) end
  end
end
call_sliced('ZREM', KEYS[1], ended, 1)
call_sliced('ZADD', KEYS[2], delayed, 2)
if done > 0 then
  redis.call('HINCRBY', KEYS[5], 'done', count_text(done))
end
if dead > 0 then
  redis.call('HINCRBY', KEYS[5], 'dead', count_text(dead))
end
-- Keep the newest finished jobs only: forget the oldest beyond the limit.
if #finished > 0 then
  call_sliced('ZADD', KEYS[4], finished, 2)
  local excess = redis.call('ZCARD', KEYS[4]) - keep
  if excess > 0 then
    local last = count_text(excess - 1)
    for _, old in ipairs(redis.call('ZRANGE', KEYS[4], '0', last)) do
      forgotten[#forgotten + 1] = old
    end
    redis.call('ZREMRANGEBYRANK', KEYS[4], '0', last)
  end
end
forget_jobs(KEYS[3], forgotten)
out[1] = pending_in(KEYS[1], KEYS[2], KEYS[6])
return out
