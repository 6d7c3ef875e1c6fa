-- signIn by users signing in for the first time today; args: fixtures dir, run, threads.
-- Thread i takes tokens i, i + threads, ...: no user signs in twice within a run.
local common = dofile("bench/wrk/common.lua")
local users, next_index, step

function init(args)
  users = common.lines(args[1] .. "/signin-" .. args[2] .. ".txt")
  step = tonumber(args[3])
  next_index = common.thread_id() + 1
end

local body = common.graphql("mutation { signIn { streak pointsAwarded alreadySigned } }", "{}")

function request()
  local token = users[next_index]
  next_index = next_index + step
  if next_index > #users then next_index = next_index - #users end
  return common.post("/graphql", token, body)
end

done = common.done("signIn")
