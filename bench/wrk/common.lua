-- Shared by the scenarios (loaded with dofile by each of them).
-- Arguments after `--`: the fixture directory written by `bench_seed`, then the scenario's own.
-- Each scenario prints one `RESULT {json}` line that bench/run collects.

local common = {}

-- The lines of a fixture file (tokens, ids), without blanks.
function common.lines(path)
  local lines = {}
  for line in io.lines(path) do
    if #line > 0 then lines[#lines + 1] = line end
  end
  return lines
end

-- Threads are numbered in setup (main Lua state) so that each can take its own share, and
-- kept so that `done` can read where each one got to.
local threads = {}
function setup(thread)
  thread:set("id", #threads)
  threads[#threads + 1] = thread
end

function common.thread_id()
  return tonumber(wrk.thread:get("id"))
end

function common.post(path, token, body)
  return wrk.format("POST", path, {
    ["Authorization"] = "Bearer " .. token,
    ["Content-Type"] = "application/json",
  }, body)
end

-- A GraphQL request body; `variables` is JSON text.
function common.graphql(query, variables)
  return '{"query":"' .. query .. '","variables":' .. variables .. '}'
end

-- The like scenarios walk the (voter, remark) pairs so that every like is a new one: a like
-- of a pair liked before changes nothing and costs about half as much, so drawing pairs at
-- random made a run's cost depend on how many pairs the runs before it had used up. Position
-- p is voter (p x 7919) mod V on remark (p + p div V) mod R: the first V positions see every
-- voter once, in an order that scatters them over the archive's index as random voters
-- would, and with V a multiple of R the pairs only repeat after V x R likes. The next
-- position is kept in the fixture directory across runs and across the two like scenarios.
-- Thread t of n takes positions start + t, start + t + n, ...
function common.like_walk(dir, threads_count)
  local voters = common.lines(dir .. "/voters.txt")
  local remarks = common.lines(dir .. "/remarks.txt")
  local file = io.open(dir .. "/like-walk.txt")
  local start = file and tonumber(file:read("*l")) or 0
  if file then file:close() end
  walk_dir = dir -- globals, read by `done` from each thread
  position = start + common.thread_id() - threads_count
  return function()
    position = position + threads_count
    local voter = (position * 7919) % #voters
    local remark = (position + math.floor(position / #voters)) % #remarks
    return voters[voter + 1], remarks[remark + 1]
  end
end

-- Saves where the like walk got to (from `done`, which runs in wrk's main Lua state: it
-- reads each thread's globals).
local function save_like_walk()
  local dir = threads[1]:get("walk_dir")
  local next_position = 0
  for _, thread in ipairs(threads) do
    local reached = thread:get("position")
    if reached and reached + 1 > next_position then next_position = reached + 1 end
  end
  local file = assert(io.open(dir .. "/like-walk.txt", "w"))
  file:write(next_position, "\n")
  file:close()
end

-- `walks`: whether the scenario walks the like pairs (its position is saved).
function common.done(scenario, walks)
  return function(summary, latency, requests)
    if walks then save_like_walk() end
    local e = summary.errors
    local seconds = summary.duration / 1e6
    io.write(string.format(
      'RESULT {"scenario":"%s","requests":%d,"seconds":%.3f,"rps":%.1f,' ..
      '"p50_ms":%.3f,"p90_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f,"non2xx":%d,"socket_errors":%d}\n',
      scenario, summary.requests, seconds, summary.requests / seconds,
      latency:percentile(50) / 1000, latency:percentile(90) / 1000,
      latency:percentile(99) / 1000, latency.max / 1000,
      e.status, e.connect + e.read + e.write + e.timeout))
  end
end

-- A scenario reading a page of 20 at a random offset of the million-member board as the
-- seeded viewer: `query` takes `$o`, and `variables` (JSON text, without braces) the rest.
-- Defines the scenario's init, request and done.
function common.random_page(scenario, query, variables)
  local viewer, members
  function init(args)
    viewer = common.lines(args[1] .. "/viewer.txt")[1]
    members = tonumber(common.lines(args[1] .. "/members.txt")[1])
    math.randomseed(os.time() * 100 + common.thread_id())
  end
  function request()
    local offset = math.random(0, members - 20)
    local prefix = variables and (variables .. ",") or ""
    return common.post("/graphql", viewer,
      common.graphql(query, "{" .. prefix .. '"o":' .. offset .. "}"))
  end
  done = common.done(scenario)
end

return common
