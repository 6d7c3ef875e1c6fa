--[[
  Takes up to ARGV[3] ready jobs, each with a visibility deadline (a plain BLPOP would
  lose a job whose worker dies; here it comes back when the deadline passes, and its
  deliverer extends the deadline while the handler runs).

  The topic's settings bound the take, for every instance at once since they are read and
  counted here: a paused topic hands out nothing; `concurrency` bounds the jobs in flight
  (the in-flight zset's size); `per_second` bounds the jobs started in one clock second,
  counted under <counts>.second and <counts>.started. A topic held back so answers nothing
  and leaves its jobs ready; other topics are taken by their own calls.

  Input:
    KEYS[1] waiting: waiting zset     lowest score first (jobs_promote.lua)
    KEYS[2] running: in-flight zset
    KEYS[3] jobs: a job's hash is this and its id   {jobs:<topic>}:job:
    KEYS[4] settings: topic settings hash   {jobs:<topic>}:settings   paused, per_second,
                                                                     concurrency
    KEYS[5] counts: topic counters hash     {jobs:<topic>}:counts     second, started, done,
                                                                     dead
    ARGV[1] deadline_ms: visibility deadline, epoch ms
    ARGV[2] lease_prefix: lease token prefix of this take (a job's lease: prefix:id)
    ARGV[3] most: most jobs to take
    ARGV[4] now_ms: now, epoch ms
    ARGV[5] channel: the topic's live channel   {jobs:<topic>}:live   each change PUBLISHes the job id
    ARGV[6] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node

  Output: { left, id, job JSON, attempts (this one included), lease, stalls, ... } - five
          per job; left = what the topic has left: 0 no job waiting, 1 jobs may be waiting,
          2 jobs wait but the topic is held back (paused, or at a limit: the caller asks
          again when a delivery of it ends or at the next tick); stalls = deliveries of the
          job whose lease ran out (the caller buries a job that stalled more often than its
          topic allows instead of running it again)
]]
-- @include jobs_fields.lua
-- A topic held back: 2 while jobs wait, 0 when none does.
local function held_back()
  return {redis.call('EXISTS', KEYS[1]) * 2}
end
local settings = redis.call('HMGET', KEYS[4], 'paused', 'per_second', 'concurrency')
if settings[1] == '1' then
  return held_back()
end
local asked = tonumber(ARGV[3])
local most = asked
local concurrency = tonumber(settings[3])
if concurrency then
  most = math.min(most, concurrency - redis.call('ZCARD', KEYS[2]))
end
local per_second = tonumber(settings[2])
local second = math.floor(tonumber(ARGV[4]) / 1000)
local started = 0
if per_second then
  local window = redis.call('HMGET', KEYS[5], 'second', 'started')
  if tonumber(window[1]) == second then
    started = tonumber(window[2]) or 0
  end
  most = math.min(most, per_second - started)
end
if most <= 0 then
  return held_back()
end
local live = listened(ARGV[5], ARGV[6])
local taken = 0
local running = {}
-- The first ranks, read then removed: ZPOPMIN would answer each job's score too, a number
-- Redis makes text (sprintf) for every job taken.
-- Ranks given as text (count_text).
local taking = redis.call('ZRANGE', KEYS[1], '0', count_text(most - 1))
if #taking > 0 then
  redis.call('ZREMRANGEBYRANK', KEYS[1], '0', count_text(#taking - 1))
end
-- Fewer than asked: none is left. All of a limited take: the topic is at its limit now.
local out = {1}
if #taking < most then
  out[1] = 0
elseif most < asked then
  out[1] = 2
end
for _, id in ipairs(taking) do
  local key = KEYS[3] .. id
  local held = redis.call('HMGET', key, 'job', 'attempts', 'stalls')
  if held[1] then
    taken = taken + 1
    -- Joined from text alone (the job id, not its rank in the take; see count_text).
    local lease = ARGV[2] .. ':' .. id
    local attempt = (tonumber(held[2]) or 0) + 1
    local attempts = count_text(attempt)
    running[#running + 1] = ARGV[1]
    running[#running + 1] = id
    -- No history event: the delivery's RUNNING is written with the event that ends it
    -- (ran_event), from the `started` and `attempts` written here.
    redis.call('HSET', key, 'lease', lease, 'attempts', attempts, 'started', ARGV[4])
    if live then redis.call(ARGV[6], ARGV[5], id) end
    out[#out + 1] = id
    out[#out + 1] = held[1]
    out[#out + 1] = attempt
    out[#out + 1] = lease
    out[#out + 1] = tonumber(held[3] or '0')
  end
end
call_sliced('ZADD', KEYS[2], running, 2)
if per_second and taken > 0 then
  redis.call('HSET', KEYS[5], 'second', second, 'started', started + taken)
end
return out
