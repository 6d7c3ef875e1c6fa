-- A page of 20 remarks with a signed-in viewer: likeCount and likedByMe for each, authors.
local common = dofile("bench/wrk/common.lua")
local voters, item

function init(args)
  voters = common.lines(args[1] .. "/voters.txt")
  item = common.lines(args[1] .. "/item.txt")[1]
  math.randomseed(os.time() * 100 + common.thread_id())
end

local query = "query($item: ID!) { remarks(itemId: $item, first: 20) { edges { node { " ..
  "id score content createdAt likeCount likedByMe author { id name } } } " ..
  "pageInfo { hasNextPage endCursor } } }"

function request()
  return common.post("/graphql", voters[math.random(#voters)],
    common.graphql(query, '{"item":"' .. item .. '"}'))
end

done = common.done("remarks page")
