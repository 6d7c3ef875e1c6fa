--[[
  Takes a lock if nobody holds it, and hands out the next fencing number.

  Input:
    KEYS[1] owner: the lock          {lock:<name>}:owner
    KEYS[2] fence: fencing counter   {lock:<name>}:fence
    ARGV[1] token: owner token (unique per acquisition)
    ARGV[2] lease_ms: lease, milliseconds

  Output: the fencing number (> 0) when taken, 0 when someone else holds the lock.

  The fencing number only grows: a write guarded by it can refuse a holder whose lease ran
  out while it was paused (the classic failure of leases without fencing).
]]
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
