--[[
  Releases a lock, only for its owner (compare-and-delete: a holder whose lease expired
  must not delete the lock of the next holder).

  Input:
    KEYS[1] owner: the lock   {lock:<name>}:owner
    ARGV[1] token: owner token
  Output: 1 released, 0 not ours
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
