-- A job's own hash is `{jobs:<topic>}:job:<id>`: a script is given the part before the id
-- (`jobs`) and joins them. Its fields: job (the JSON), attempts, error, status, stalls,
-- priority, lease, progress, result, started, finished, runs, history. An empty lease is
-- none (a delivery ended): writing it costs one call fewer than removing the field, and no
-- delivery's token is empty. A hash per job, in
-- its topic's slot, rather than `<id>/<part>` fields of one hash per topic: at 100,000 jobs
-- that hash missed the caches on every field (the same four-field read cost 9.5 µs there
-- and 2.6 µs in a small hash), and forgetting a job was an HDEL of 13 fields, not one DEL.

-- Events kept per job: the newest, the oldest forgotten.
local HISTORY_KEPT = 20
-- Most values one command takes from unpack (Lua's C stack holds about 8,000).
local UNPACK_MOST = 1000

-- The text of a count the take or the finish writes per job (an attempt, a run). A number
-- made text goes through sprintf, about a microsecond, so the take and the finish join
-- what they write from text they have wherever they can; this count is nearly always 1 (a
-- first attempt; a job's only run).
local function count_text(n)
  if n == 1 then
    return '1'
  end
  return tostring(n)
end

-- Forgets jobs: their hashes, in slices unpack can take.
local function forget_jobs(jobs, ids)
  for first = 1, #ids, UNPACK_MOST do
    local keys = {}
    for i = first, math.min(first + UNPACK_MOST - 1, #ids) do
      keys[#keys + 1] = jobs .. ids[i]
    end
    redis.call('DEL', unpack(keys))
  end
end

-- A stored history with an event added: {at, state, attempt, error}, as stored. `stored`
-- is the field's text (nil or false: none yet). The event is written as text and appended:
-- decoding and encoding the history with cjson cost more than the rest of a take. Only a
-- history that may be full (as many "],[" as separate the events kept, which an error
-- text can only add to) is decoded to drop its oldest.
--
-- `at` and `attempt` are integers, best given as their text (an argument, a stored field;
-- see count_text).
local function history_with(stored, at, state, attempt, error_text)
  local event = '[' .. at .. ',"' .. state .. '",' .. (attempt or '0') .. ','
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

-- Runs `command key values...` over `values` in slices unpack can take; `width` values
-- (1 for members, 2 for score and member) stay together.
local function call_sliced(command, key, values, width)
  local step = UNPACK_MOST - UNPACK_MOST % width
  for first = 1, #values, step do
    redis.call(command, key, unpack(values, first, math.min(first + step - 1, #values)))
  end
end

-- 1 when any of the topic's zsets (or lists) `...` holds a job, else 0: an emptied topic's
-- visit may come now, to drop it from the index of due topics.
local function pending_in(...)
  return math.min(redis.call('EXISTS', ...), 1)
end

-- Whether anyone listens on a topic's live channel (`publish`: PUBLISH or SPUBLISH, the
-- command that would tell them): a change nobody hears is not published. Asked once per
-- call; a subscriber confirmed before the call is counted, which is all `jobChanged`
-- promises.
local function listened(channel, publish)
  local count = publish == 'SPUBLISH' and 'SHARDNUMSUB' or 'NUMSUB'
  return redis.call('PUBSUB', count, channel)[2] > 0
end
