--[[
  Reads one part of a season board for myRankChanged's reader (src/features/leaderboard/ranks.rs),
  atomically with the part's change counter, so that the reader knows exactly which changes
  of the part the read reflects: the scores and ranks within the part of users it holds,
  and, for users of other parts, how many of its members are ahead of them.

  Input:
    KEYS[1] board: a part of a season board   {points:B}:board:<YYYYMM>
    KEYS[2] changes: its change counter         {points:B}:board:<YYYYMM>:changes
    ARGV[1] own: how many users of the part follow
    ARGV[2..] users: those users, then pairs for users of other parts: score, user

  Output: { change counter (0: never changed),
            per user of the part: score (nil: not on the board), rank within the part (nil),
            per user of another part: members of a higher score, the members of its score }
]]

local reply = {tonumber(redis.call('GET', KEYS[2]) or '0')}
local own = tonumber(ARGV[1])
for i = 2, own + 1 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  reply[#reply + 1] = score
  reply[#reply + 1] = score and redis.call('ZREVRANK', KEYS[1], ARGV[i])
end
for i = own + 2, #ARGV, 2 do
  reply[#reply + 1] = redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[i], '+inf')
  reply[#reply + 1] = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[i], ARGV[i])
end
return reply
