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

-- One event of a history, {at, state, attempt, error}, as it is stored: an error text's
-- every "]" written as its JSON escape "\u005d", so that "],[" only ever separates events.
local function history_event(at, state, attempt, error_text)
  return '[' .. at .. ',"' .. state .. '",' .. (attempt or '0') .. ','
    .. (error_text and error_text ~= '' and (string.gsub(cjson.encode(error_text), '%]',
      '\\u005d')) or '""') .. ']'
end

-- A stored history with an event added: {at, state, attempt, error}, as stored. `stored`
-- is the field's text (nil or false: none yet). The event is written as text and appended,
-- and a full history drops its first event by cutting before the first "],[": no history
-- is decoded (decoding and encoding a full one with cjson made a long-lived job's take and
-- finish cost Redis four to eight times what a new job's do).
--
-- A history is stored led by a space for each event it holds, which JSON allows: its count
-- is one find away, where counting its separators cost a full history's event about a
-- third of a take, and a field of its own would be read and written with every event. A
-- history kept by an earlier version (it begins with "[") is decoded once, and the events
-- it keeps are written as history_event writes them.
--
-- `at` and `attempt` are integers, best given as their text (an argument, a stored field;
-- see count_text).
local function history_with(stored, at, state, attempt, error_text)
  local event = history_event(at, state, attempt, error_text)
  if not stored or stored == '' then
    return ' [' .. event .. ']'
  end
  local held = (string.find(stored, '[', 1, true) or 1) - 1
  if held > 0 and held < HISTORY_KEPT then
    return ' ' .. string.sub(stored, 1, -2) .. ',' .. event .. ']'
  end
  local first_end = held > 0 and string.find(stored, '],[', held + 2, true)
  if first_end then
    return string.sub(stored, 1, held + 1) .. string.sub(stored, first_end + 2, -2) .. ','
      .. event .. ']'
  end
  -- Kept by an earlier version (or not a history at all: it starts again).
  local decoded, events = pcall(cjson.decode, stored)
  local kept = {}
  if decoded and type(events) == 'table' then
    for i = math.max(1, #events - HISTORY_KEPT + 2), #events do
      local old = events[i]
      if type(old) == 'table' and type(old[1]) == 'number' and type(old[2]) == 'string' then
        kept[#kept + 1] = history_event(string.format('%d', old[1]), old[2],
          string.format('%d', tonumber(old[3]) or 0), type(old[4]) == 'string' and old[4])
      end
    end
  end
  kept[#kept + 1] = event
  return string.rep(' ', #kept) .. '[' .. table.concat(kept, ',') .. ']'
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
