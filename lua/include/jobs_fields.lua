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

-- The text of a count or rank a script writes or asks by (an attempt, a run, the last rank
-- of a take). A number made text goes through sprintf, about a microsecond (tostring, or
-- redis.call given a number: "%.17g"), so the scripts join what they write from text they
-- have wherever they can, and a count under 100, nearly every one they write (a first
-- attempt, a job's only run, a take's few ranks), is made text from its digits.
local DIGITS = '0123456789'
local function count_text(n)
  if n >= 0 and n < 10 then
    return string.sub(DIGITS, n + 1, n + 1)
  elseif n >= 10 and n < 100 then
    local ones = n % 10
    local tens = (n - ones) / 10
    return string.sub(DIGITS, tens + 1, tens + 1) .. string.sub(DIGITS, ones + 1, ones + 1)
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
-- `at` and `attempt` are integers, best given as their text (an argument, a stored field;
-- see count_text).
local function history_event(at, state, attempt, error_text)
  return '[' .. at .. ',"' .. state .. '",' .. (attempt or '0') .. ','
    .. (error_text and error_text ~= '' and (string.gsub(cjson.encode(error_text), '%]',
      '\\u005d')) or '""') .. ']'
end

-- A stored history with `added` events added: `events`, each written by history_event,
-- joined by ",". `stored` is the field's text (nil or false: none yet). The events are
-- appended as text, and a history grown past HISTORY_KEPT drops its oldest by cutting
-- before their "],[": no history is decoded (decoding and encoding a full one with cjson
-- made a long-lived job's take and finish cost Redis four to eight times what a new job's
-- do).
--
-- A history is stored led by a space for each event it holds, which JSON allows: its count
-- is one find away, where counting its separators cost a full history's event about a
-- third of a take, and a field of its own would be read and written with every event. A
-- history kept by an earlier version (it begins with "[") is decoded once, and the events
-- it keeps are written as history_event writes them.
local function history_with(stored, added, events)
  if not stored or stored == '' then
    return string.rep(' ', added) .. '[' .. events .. ']'
  end
  local held = (string.find(stored, '[', 1, true) or 1) - 1
  if held > 0 and held + added <= HISTORY_KEPT then
    return string.rep(' ', added) .. string.sub(stored, 1, -2) .. ',' .. events .. ']'
  end
  -- Full: the oldest events go, as many as were added, each one find further.
  local cut = held > 0 and held + 1
  for _ = 1, held + added - HISTORY_KEPT do
    cut = cut and string.find(stored, '],[', cut + 1, true)
  end
  if cut then
    return string.rep(' ', HISTORY_KEPT) .. '[' .. string.sub(stored, cut + 2, -2) .. ','
      .. events .. ']'
  end
  -- Kept by an earlier version (or not a history at all: it starts again).
  local decoded, old_events = pcall(cjson.decode, stored)
  local kept = {}
  if decoded and type(old_events) == 'table' then
    for i = math.max(1, #old_events - HISTORY_KEPT + added + 1), #old_events do
      local old = old_events[i]
      if type(old) == 'table' and type(old[1]) == 'number' and type(old[2]) == 'string' then
        kept[#kept + 1] = history_event(string.format('%d', old[1]), old[2],
          string.format('%d', tonumber(old[3]) or 0), type(old[4]) == 'string' and old[4])
      end
    end
  end
  kept[#kept + 1] = events
  return string.rep(' ', #kept + added - 1) .. '[' .. table.concat(kept, ',') .. ']'
end

-- The event of a delivery that began at `started` (the take's time, as stored) as its
-- `attempt`: written when the delivery ends (or stalls, or is cancelled), with the event
-- that ends it, so that a take writes no history (a history of a running job reads it
-- from the job's `started` and `attempts`: `Jobs::describe`).
local function ran_event(started, attempt)
  return history_event(started, 'RUNNING', attempt, '')
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
