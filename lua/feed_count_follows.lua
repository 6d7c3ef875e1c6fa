--[[
  Moves follower counts by follow changes (a follow +1, an unfollow -1), each change once:
  a change whose marker exists was counted already (a delivery retried after its reply was
  lost, a row whose delete failed, a request and a retrier delivering it at once). Counts
  and markers share the hash tag {feed}, so the check and the move are one step in one
  slot; the markers expire (see `Keys::follow_counted`).

  Input:
    KEYS[1] counts: follower counts        {feed}:follower-counts
    KEYS[2..] markers: per change, its marker   {feed}:counted:<change id>
    ARGV[1] marker_ttl_seconds: marker TTL seconds
    ARGV[2..] changes: per change, two arguments: followee id, delta

  Output: how many of the changes were counted now (the others had been before).
]]

local counted = 0
for i = 2, #KEYS do
  if redis.call('SET', KEYS[i], 1, 'NX', 'EX', ARGV[1]) then
    local at = 2 * i - 2
    redis.call('HINCRBY', KEYS[1], ARGV[at], ARGV[at + 1])
    counted = counted + 1
  end
end
return counted
