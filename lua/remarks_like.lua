--[[
  Likes a remark for a voter, at most once for ever.

  Input:
    KEYS[1] info: remark info hash     {likes:S}:remark:<id>          fields likes, author, hydrated, gone
    KEYS[2] relation: like relation        {likes:S}:remark:<id>:voter:<uid>   "1" liked, "0" not liked
    KEYS[3] likers: earliest likers zset {likes:S}:remark:<id>:likers
    KEYS[4] events: vote stream          {likes:S}:events
    ARGV[1] voter: voter id
    ARGV[2] remark: remark id
    ARGV[3] now_ms: now, epoch ms
    ARGV[4] relation_ttl_seconds: relation TTL, seconds
    ARGV[5] known: what is known when the relation key is missing:
            young   - the remark is younger than the TTL, so no key means no vote
                      (unless the info hash was rebuilt after a Redis loss)
            unknown - ask the archive first
            liked / unliked / none - the archive's answer (none: no vote at all)
    ARGV[6] channel: live channel of the remark's count
    ARGV[7] likers_kept: how many earliest likers to keep
    ARGV[8] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node

  Output: { status, likes, liked, changed }
    status (lua/include/status.lua) OK done, NOT_FOUND the remark is deleted or hidden,
           MISSING remark info missing (the caller
           rebuilds it from SQL, or answers NOT_FOUND), ASK_ARCHIVE the archive must decide
           (the caller asks it and calls again)

  Events: on a change, XADD to KEYS[4] a VoteEvent (src/features/remarks/events.rs), packed
          (src/infra/streams/mod.rs): {remark, voter, author, voting=1, count, at, first},
          first=1 when the voter is known
          never to have voted on the remark before (so its author has never been paid for
          this liker), and PUBLISH the new count on ARGV[6].

  The earliest likers (KEYS[3]) hold the first ARGV[7] current likers, or fewer when unlikes
  left a gap (see below); `likers` refills a short set from the archive.

  Why a relation key per voter rather than a set per remark: each key expires on its own,
  so memory follows recent activity; the archive answers for older votes.
]]
-- @include status.lua
-- @include remarks_relation.lua

local author, relation, voted = read_relation(KEYS[1], KEYS[2], ARGV[5])
if not author then
  return {relation, 0, 0, 0}
end
local ttl = tonumber(ARGV[4])
if relation == '1' then
  redis.call('SET', KEYS[2], '1', 'EX', ttl)
  return {OK, tonumber(redis.call('HGET', KEYS[1], 'likes') or '0'), 1, 0}
end

redis.call('SET', KEYS[2], '1', 'EX', ttl)
local likes = redis.call('HINCRBY', KEYS[1], 'likes', 1)
-- The newest liker belongs to the earliest ARGV[7] only while the set still holds every
-- earlier liker. Once an unlike has taken one of the kept likers out while others were
-- waiting past the cap (or after a Redis loss), the set has a gap that only the archive can
-- fill with the right voter: the newest is left out and the reader refills from the archive.
local keep = tonumber(ARGV[7])
local kept = redis.call('ZCARD', KEYS[3])
if kept < keep and kept == likes - 1 then
  redis.call('ZADD', KEYS[3], 'NX', ARGV[3], ARGV[1])
end
add_vote_event(KEYS[4], ARGV[2], ARGV[1], author, 1, likes, ARGV[3], voted and 0 or 1)
redis.call(ARGV[8], ARGV[6], likes)
return {OK, likes, 1, 1}
