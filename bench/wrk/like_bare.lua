-- The same like through `POST /bench/like` (no GraphQL; `bench` builds only), on the same
-- walk of new pairs as like_remark.lua.
local common = dofile("bench/wrk/common.lua")
local next_pair

function init(args)
  next_pair = common.like_walk(args[1], tonumber(args[2] or "2"))
end

function request()
  local voter, remark = next_pair()
  return common.post("/bench/like", voter, '{"remarkId":"' .. remark .. '"}')
end

done = common.done("bare like route", true)
