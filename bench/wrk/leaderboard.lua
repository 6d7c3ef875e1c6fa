-- leaderboard(first: 20) at a random offset of the million-member board, with `me`.
local common = dofile("bench/wrk/common.lua")
common.random_page("leaderboard", "query($o: Int!) { leaderboard(first: 20, offset: $o) { total " ..
  "me { rank points } entries { rank points user { id name } } } }")
