-- submitScore by the service role on an INCREMENT board, for users drawn from 100,000, each
-- request with an idempotency key of its own (a replay would change nothing and cost less).
local common = dofile("bench/wrk/common.lua")
local service, board, started
local sent = 0

function init(args)
  service = common.lines(args[1] .. "/service.txt")[1]
  board = common.lines(args[1] .. "/board.txt")[1]
  started = os.time()
  math.randomseed(started * 100 + common.thread_id())
end

local query = "mutation($b: String!, $u: ID!, $s: Int!, $k: String!) { submitScore(boardKey: $b, " ..
  "userId: $u, score: $s, idempotencyKey: $k) { rank score } }"

function request()
  sent = sent + 1
  local user = 5000000000 + math.random(0, 99999)
  local key = string.format("%d-%d-%d", started, common.thread_id(), sent)
  local variables = string.format('{"b":"%s","u":"%d","s":%d,"k":"%s"}',
    board, user, math.random(1, 100), key)
  return common.post("/graphql", service, common.graphql(query, variables))
end

done = common.done("submitScore")
