--[[
  Moves follower counts by follow changes (a follow +1, an unfollow -1), each change once:
  a change whose marker exists was counted already (a delivery retried after its reply was
  lost, a row whose delete failed, a request and a retrier delivering it at once). Counts
  and markers share the hash tag {feed}, so the check and the move are one step in one
  slot; the markers expire (see `Keys::follow_counted`).

  Input:
    KEYS[1] counts: follower counts        {feed}:follower-counts
    KEYS[2] events: the follow events       {feed}:follow-events
    KEYS[3..] markers: per change, its marker   {feed}:counted:<change id>
    ARGV[1] marker_ttl_seconds: marker TTL seconds
    ARGV[2] now_ms: epoch ms of the delivery
    ARGV[3..] changes: per change, four arguments: followee id, delta, follower id, change id

  Output: how many of the changes were counted now (the others had been before).

  Events: XADDs a FollowEvent {change, follower, followee, at} (src/features/feed/events.rs)
  for each follow counted now, in the step that counts it: each follow is told once, and
  never lost between the count and the telling (notifications read them).
]]

local counted = 0
for i = 3, #KEYS do
  if redis.call('SET', KEYS[i], 1, 'NX', 'EX', ARGV[1]) then
    local at = 4 * (i - 3) + 3
    redis.call('HINCRBY', KEYS[1], ARGV[at], ARGV[at + 1])
    if tonumber(ARGV[at + 1]) > 0 then
      redis.call('XADD', KEYS[2], '*', 'change', ARGV[at + 3],
        'follower', ARGV[at + 2], 'followee', ARGV[at], 'at', ARGV[2])
    end
    counted = counted + 1
  end
end
return counted
