--[[
  Submits a score to a user's record on one period of a board, once per idempotency key:
  the operator decides the new record, the record's place in the board's part moves with
  it, and the change is counted and published for the live readers.

  A part's member is `<subscore key><time key>:<user>` and its score the record's score
  (negated on an ASC board), so that ZREVRANGE reads the board in its order: the score,
  then the subscore, then whoever reached it first (see src/features/boards/mod.rs).

  Input:
    KEYS[1] part: the board part of the user's bucket   {board:<key>:B}:z:<period>
    KEYS[2] record: the user's record hash               {board:<key>:B}:r:<period>:<user>
    KEYS[3] marker: the idempotency key's marker         {board:<key>:B}:sub:<user>:<digest>
    KEYS[4] changes: the part's change counter           {board:<key>:B}:changes:<period>
    ARGV[1] user: the user id
    ARGV[2] operator: INCREMENT, DECREMENT, BEST or SET
    ARGV[3] direction: 1 for DESC, -1 for ASC
    ARGV[4] score: the submitted score
    ARGV[5] subscore: the submitted subscore
    ARGV[6] metadata: JSON text, or '' for none
    ARGV[7] now_ms: now, epoch ms
    ARGV[8] marker_ttl_seconds: how long Redis remembers the key (SQL remembers for ever)
    ARGV[9] channel: the part's live channel
    ARGV[10] publish: SPUBLISH on a Redis Cluster, PUBLISH on one node

  Output: { OK or ALREADY (a replay: nothing changed), score, subscore, reached_at_ms,
            updated_at_ms, metadata, version } - the record after the call; a record of
          version 0 does not exist.
]]
-- @include status.lua

local user = ARGV[1]
local operator = ARGV[2]
local direction = tonumber(ARGV[3])
local score = tonumber(ARGV[4])
local subscore = tonumber(ARGV[5])
local now = tonumber(ARGV[7])

local function record(status)
  local r = redis.call('HMGET', KEYS[2], 'score', 'subscore', 'reached', 'updated', 'metadata', 'version')
  return {status, r[1] or '0', r[2] or '0', r[3] or '0', r[4] or '0', r[5] or '', r[6] or '0'}
end

if redis.call('EXISTS', KEYS[3]) == 1 then
  return record(ALREADY)
end

local old = redis.call('HMGET', KEYS[2], 'score', 'subscore', 'reached', 'member')
local exists = old[1] ~= false
local old_score = tonumber(old[1] or '0')
local old_sub = tonumber(old[2] or '0')
local new_score, new_sub = old_score, old_sub
if operator == 'INCREMENT' then
  new_score, new_sub = old_score + score, old_sub + subscore
elseif operator == 'DECREMENT' then
  new_score, new_sub = old_score - score, old_sub - subscore
elseif operator == 'SET' then
  new_score, new_sub = score, subscore
else
  -- BEST: the better for the board's order, the subscore breaking a tie.
  local better = not exists
    or score * direction > old_score * direction
    or (score == old_score and subscore * direction > old_sub * direction)
  if better then
    new_score, new_sub = score, subscore
  end
end

local moved = (not exists) or new_score ~= old_score or new_sub ~= old_sub
local reached = tonumber(old[3] or '0')
if moved then
  reached = now
end
-- The subscore's key stays within its ten digits (a subscore past 32 bits ties with the
-- bound, and its order is by time from there).
local sub_key = math.max(0, math.min(4294967295, new_sub * direction + 2147483648))
local member = string.format('%010.0f', sub_key)
  .. string.format('%013.0f', 9999999999999 - reached) .. ':' .. user
local fields = {'score', string.format('%.0f', new_score), 'subscore', string.format('%.0f', new_sub),
  'reached', string.format('%.0f', reached), 'updated', ARGV[7], 'member', member}
if ARGV[6] ~= '' then
  fields[#fields + 1] = 'metadata'
  fields[#fields + 1] = ARGV[6]
end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('HINCRBY', KEYS[2], 'version', 1)
redis.call('SET', KEYS[3], '1', 'EX', ARGV[8])
if moved then
  if old[4] and old[4] ~= member then
    redis.call('ZREM', KEYS[1], old[4])
  end
  redis.call('ZADD', KEYS[1], string.format('%.0f', new_score * direction), member)
  local change = redis.call('INCR', KEYS[4])
  redis.call(ARGV[10], ARGV[9], change .. ' ' .. user)
end
return record(OK)
