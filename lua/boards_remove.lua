--[[
  Removes a user's record from one period of a board (a cheater's): its member leaves the
  part, which re-ranks everyone below, and the change is counted and published.

  Input:
    KEYS[1] part: the board part of the user's bucket   {board:<key>:B}:z:<period>
    KEYS[2] record: the user's record hash               {board:<key>:B}:r:<period>:<user>
    KEYS[3] changes: the part's change counter           {board:<key>:B}:changes:<period>
    ARGV[1] user: the user id
    ARGV[2] channel: the part's live channel
    ARGV[3] publish: SPUBLISH on a Redis Cluster, PUBLISH on one node

  Output: OK removed, NOT_FOUND no such record
]]
-- @include status.lua

local member = redis.call('HGET', KEYS[2], 'member')
if not member then
  return NOT_FOUND
end
redis.call('ZREM', KEYS[1], member)
redis.call('DEL', KEYS[2])
local change = redis.call('INCR', KEYS[3])
redis.call(ARGV[3], ARGV[2], change .. ' ' .. ARGV[1])
return OK
