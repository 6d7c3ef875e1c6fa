-- likeRemark through HTTP + GraphQL: random voters on the item's remarks.
local common = dofile("bench/wrk/common.lua")
local voters, remarks

function init(args)
  voters = common.lines(args[1] .. "/voters.txt")
  remarks = common.lines(args[1] .. "/remarks.txt")
  math.randomseed(os.time() * 100 + common.thread_id())
end

local query = "mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount changed } }"

function request()
  local remark = remarks[math.random(#remarks)]
  return common.post("/graphql", voters[math.random(#voters)],
    common.graphql(query, '{"id":"' .. remark .. '"}'))
end

done = common.done("likeRemark")
