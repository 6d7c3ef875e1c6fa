-- A job's own fields in its topic's pool (`<id>/<part>`), and its bounded history.
local JOB_PARTS = {'attempts', 'error', 'status', 'stalls', 'priority', 'lease', 'progress',
  'result', 'started', 'finished', 'runs', 'history'}
-- Events kept per job: the newest, the oldest forgotten.
local HISTORY_KEPT = 20
-- Most values one command takes from unpack (Lua's C stack holds about 8,000).
local UNPACK_MOST = 1000

-- Forgets a job: its JSON and every field of it.
local function forget_job(pool, id)
  local fields = {id}
  for _, part in ipairs(JOB_PARTS) do
    fields[#fields + 1] = id .. '/' .. part
  end
  redis.call('HDEL', pool, unpack(fields))
end

-- A stored history with an event added: {at, state, attempt, error}, as stored. `stored`
-- is the field's text (nil or false: none yet). The event is written as text and appended:
-- decoding and encoding the history with cjson cost more than the rest of a take. Only a
-- history that may be full (as many "],[" as separate the events kept, which an error
-- text can only add to) is decoded to drop its oldest.
local function history_with(stored, at, state, attempt, error_text)
  local event = '[' .. string.format('%d', tonumber(at) or 0) .. ',"' .. state .. '",'
    .. string.format('%d', tonumber(attempt) or 0) .. ','
    .. (error_text and error_text ~= '' and cjson.encode(error_text) or '""') .. ']'
  if not stored or stored == '' or stored == '[]' then
    return '[' .. event .. ']'
  end
  local separators, from = 0, 1
  while separators < HISTORY_KEPT - 1 do
    from = string.find(stored, '],[', from, true)
    if not from then
      return string.sub(stored, 1, -2) .. ',' .. event .. ']'
    end
    separators, from = separators + 1, from + 3
  end
  local events = cjson.decode(stored)
  events[#events + 1] = cjson.decode(event)
  while #events > HISTORY_KEPT do
    table.remove(events, 1)
  end
  return cjson.encode(events)
end

-- Adds an event to a job's history.
local function job_event(pool, id, at, state, attempt, error_text)
  local field = id .. '/history'
  redis.call('HSET', pool, field,
    history_with(redis.call('HGET', pool, field), at, state, attempt, error_text))
end

-- Runs `command key values...` over `values` in slices unpack can take; `width` values
-- (1 for members, 2 for score and member) stay together.
local function call_sliced(command, key, values, width)
  local step = UNPACK_MOST - UNPACK_MOST % width
  for first = 1, #values, step do
    redis.call(command, key, unpack(values, first, math.min(first + step - 1, #values)))
  end
end

-- Whether anyone listens on a topic's live channel (`publish`: PUBLISH or SPUBLISH, the
-- command that would tell them): a change nobody hears is not published. Asked once per
-- call; a subscriber confirmed before the call is counted, which is all `jobChanged`
-- promises.
local function listened(channel, publish)
  local count = publish == 'SPUBLISH' and 'SHARDNUMSUB' or 'NUMSUB'
  return redis.call('PUBSUB', count, channel)[2] > 0
end
