-- likeRemark through HTTP + GraphQL, every like a new (voter, remark) pair (common.like_walk).
-- Arguments: the fixture directory, wrk's thread count (2 unless given).
local common = dofile("bench/wrk/common.lua")
local next_pair

function init(args)
  next_pair = common.like_walk(args[1], tonumber(args[2] or "2"))
end

local query = "mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount changed } }"

function request()
  local voter, remark = next_pair()
  return common.post("/graphql", voter, common.graphql(query, '{"id":"' .. remark .. '"}'))
end

done = common.done("likeRemark", true)
