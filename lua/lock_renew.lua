--[[
  Extends a held lock's lease, only for its owner.

  Input:
    KEYS[1] owner: the lock   {lock:<name>}:owner
    ARGV[1] token: owner token
    ARGV[2] lease_ms: lease, milliseconds
  Output: 1 extended, 0 the lock is no longer ours (expired, or taken by another owner)
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
