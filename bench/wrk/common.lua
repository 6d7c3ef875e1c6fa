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

-- Threads are numbered in setup (main Lua state) so that each can take its own share.
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
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

function common.done(scenario)
  return function(summary, latency, requests)
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

return common
