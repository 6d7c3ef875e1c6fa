-- board(key: "season", first: 20) at a random offset of the million-record board, with `me`:
-- the season board read through the generic boards API (any board has its layout).
local common = dofile("bench/wrk/common.lua")
local viewer, members

function init(args)
  viewer = common.lines(args[1] .. "/viewer.txt")[1]
  members = tonumber(common.lines(args[1] .. "/members.txt")[1])
  math.randomseed(os.time() * 100 + common.thread_id())
end

local query = "query($b: String!, $o: Int!) { board(key: $b, first: 20, offset: $o) { total " ..
  "me { rank score } records { rank score user { id name } } } }"

function request()
  local offset = math.random(0, members - 20)
  return common.post("/graphql", viewer, common.graphql(query, '{"b":"season","o":' .. offset .. '}'))
end

done = common.done("board page")
