-- The same like through `POST /bench/like` (no GraphQL; `bench` builds only).
local common = dofile("bench/wrk/common.lua")
local voters, remarks

function init(args)
  voters = common.lines(args[1] .. "/voters.txt")
  remarks = common.lines(args[1] .. "/remarks.txt")
  math.randomseed(os.time() * 100 + common.thread_id())
end

function request()
  local remark = remarks[math.random(#remarks)]
  return common.post("/bench/like", voters[math.random(#voters)],
    '{"remarkId":"' .. remark .. '"}')
end

done = common.done("bare like route")
