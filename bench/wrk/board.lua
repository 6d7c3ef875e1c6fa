-- board(key: "season", first: 20) at a random offset of the million-record board, with `me`:
-- the season board read through the generic boards API (any board has its layout).
local common = dofile("bench/wrk/common.lua")
common.random_page("board page", "query($b: String!, $o: Int!) { board(key: $b, first: 20, " ..
  "offset: $o) { total me { rank score } records { rank score user { id name } } } }", '"b":"season"')
