--[[
  Withdraws a remark from likes: deleted (its counter, earliest likers and relation keys
  removed, a tombstone left in the counter's place) or hidden (folded: its counter kept for
  its author and admins, marked so that likes stop). The like scripts answer NOT_FOUND on a
  marked counter, so no like lands after this script, whatever runs concurrently.

  Input:
    KEYS[1] info: remark info hash     {likes:S}:remark:<id>          fields likes, author, hydrated, gone
    KEYS[2] likers: earliest likers zset {likes:S}:remark:<id>:likers
    KEYS[3..] relations: like relations to remove (deleted only)  {likes:S}:remark:<id>:voter:<uid>
    ARGV[1] state: deleted | hidden
    ARGV[2] tombstone_ttl_seconds: how long a deleted remark's tombstone stays (after it SQL,
            which marks the remark deleted, answers a like with NOT_FOUND)

  Output: OK (lua/include/status.lua)

  Why a tombstone rather than no key: a like that found no counter rebuilds it from SQL; one
  that read SQL just before the delete would write the counter back. The rebuild's writes
  leave the field `gone` in place, so the like scripts still refuse.
]]
-- @include status.lua

if ARGV[1] == 'deleted' then
  redis.call('DEL', KEYS[1], KEYS[2])
  for i = 3, #KEYS do
    redis.call('DEL', KEYS[i])
  end
  redis.call('HSET', KEYS[1], 'gone', 'deleted')
  redis.call('EXPIRE', KEYS[1], ARGV[2])
else
  redis.call('HSET', KEYS[1], 'gone', 'hidden')
end
return OK
