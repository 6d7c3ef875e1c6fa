--[[
  Adds delayed jobs of one topic (a hash per job and a delay zset), many per call: a batch
  of new jobs, or a chunk of a rebuild from SQL. An id is refused while its job is pending
  (delayed, ready or in flight); once that job ended (done or cancelled) the id may be used
  again, and the new job replaces what its hash remembered of the old one.

  Input:
    KEYS[1] jobs: a job's hash is this and its id   {jobs:<topic>}:job:   (jobs_fields.lua)
    KEYS[2] delayed: delay zset       {jobs:<topic>}:delayed    score = run at, epoch ms
    KEYS[3] finished: finished zset    {jobs:<topic>}:finished   an ended job reused leaves it
    KEYS[4] counts: topic counters hash {jobs:<topic>}:counts     prioritised: 1 once a job of
                                                   the topic had a priority (jobs_promote.lua)
    ARGV[1] now_ms: now, epoch ms (the history's first event)
    ARGV[2] channel: the topic's live channel   {jobs:<topic>}:live   each change PUBLISHes the job id
    ARGV[3] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node
    ARGV[4..] jobs: six per job: job id, job JSON, run at (epoch ms), attempts so far (0 if new),
                    priority (0 to 1000, higher first once due; kept as `priority` when not 0),
                    runs of its series so far (0 if new; a rebuilt repeating job keeps its count)

  Output: two per job, in order (statuses of lua/include/status.lua): OK, '' added;
          TAKEN, <JSON of the pending job> refused (a job with this id is pending; the
          caller's SQL record then describes it)
]]
-- @include status.lua
-- @include jobs_fields.lua
local live = listened(ARGV[2], ARGV[3])
local out = {}
local delayed = {}
local prioritised = false
for i = 4, #ARGV, 6 do
  local id = ARGV[i]
  local key = KEYS[1] .. id
  local held = redis.call('HMGET', key, 'job', 'status')
  local pending, status = held[1], held[2]
  if pending and status ~= 'DONE' and status ~= 'CANCELLED' then
    out[#out + 1] = TAKEN
    out[#out + 1] = pending
  else
    -- An ended job by this id: what it remembered goes, and it leaves the finished jobs.
    if status then
      redis.call('DEL', key)
      redis.call('ZREM', KEYS[3], id)
    end
    local set = {'job', ARGV[i + 1], 'attempts', ARGV[i + 3],
      'history', history_with(nil, 1, history_event(ARGV[1], 'DELAYED', ARGV[i + 3], ''))}
    if ARGV[i + 4] ~= '0' then
      prioritised = true
      set[#set + 1] = 'priority'
      set[#set + 1] = ARGV[i + 4]
    end
    if ARGV[i + 5] ~= '0' then
      set[#set + 1] = 'runs'
      set[#set + 1] = ARGV[i + 5]
    end
    redis.call('HSET', key, unpack(set))
    if live then redis.call(ARGV[3], ARGV[2], id) end
    delayed[#delayed + 1] = ARGV[i + 2]
    delayed[#delayed + 1] = id
    out[#out + 1] = OK
    out[#out + 1] = ''
  end
end
call_sliced('ZADD', KEYS[2], delayed, 2)
if prioritised then
  redis.call('HSET', KEYS[4], 'prioritised', 1)
end
return out
