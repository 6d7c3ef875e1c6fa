-- leaderboard(first: 20) at a random offset of the million-member board, with `me`.
local common = dofile("bench/wrk/common.lua")
local viewer, members

function init(args)
  viewer = common.lines(args[1] .. "/viewer.txt")[1]
  members = tonumber(common.lines(args[1] .. "/members.txt")[1])
  math.randomseed(os.time() * 100 + common.thread_id())
end

local query = "query($o: Int!) { leaderboard(first: 20, offset: $o) { total " ..
  "me { rank points } entries { rank points user { id name } } } }"

function request()
  local offset = math.random(0, members - 20)
  return common.post("/graphql", viewer, common.graphql(query, '{"o":' .. offset .. '}'))
end

done = common.done("leaderboard")
