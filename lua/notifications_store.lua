--[[
  Writes a user's notification state as SQL has it (src/features/notifications/hot.rs):
  the newest notifications (the hot list, trimmed to `keep`), the read watermark and the
  unread count. Every value comes from SQL after its commit, with the user's version, so the
  script only has to keep the newest: a notification is written when its place (`seq`) is
  higher than the one held, the state when its version is higher. A late or repeated write
  therefore never undoes a newer one, whatever order two instances' writes arrive in.

  Input:
    KEYS[1] hot: the newest notifications by place   {notify:U}:hot
    KEYS[2] items: each held notification as JSON     {notify:U}:items
    KEYS[3] state: version, read_seq, unread          {notify:U}:state
    ARGV[1] version: the user's version in SQL
    ARGV[2] read_seq: the read watermark
    ARGV[3] unread: the unread count
    ARGV[4] replace: 1 to drop what is held first (a rebuild from SQL), else 0
    ARGV[5] keep: how many notifications the hot list holds
    ARGV[6] publish: PUBLISH or SPUBLISH
    ARGV[7] channel: the user's live channel, {notify:U}:live
    ARGV[8..] items: per notification, three arguments: id, seq, JSON

  Output: status (lua/include/status.lua): OK written; ALREADY a rebuild older than what is
    held; MISSING nothing is held for the user (Redis lost it, or the user is new) and this
    is no rebuild: the caller rebuilds the user from SQL, since a hot list holding only this
    write's notifications would read as complete.

  Events: publishes `n <JSON>` on the channel for each notification that moved up (new, or
  a group that grew), and `c <unread>` when the unread count changed.
]]
-- @include status.lua

local held = tonumber(redis.call('HGET', KEYS[3], 'version') or '-1')
local version = tonumber(ARGV[1])
if ARGV[4] == '1' then
  if held > version then
    return ALREADY
  end
  redis.call('DEL', KEYS[1], KEYS[2])
elseif held < 0 then
  return MISSING
end

for i = 8, #ARGV, 3 do
  local id, seq = ARGV[i], tonumber(ARGV[i + 1])
  local old = redis.call('ZSCORE', KEYS[1], id)
  if not old or seq > tonumber(old) then
    redis.call('ZADD', KEYS[1], seq, id)
    redis.call('HSET', KEYS[2], id, ARGV[i + 2])
    if ARGV[4] ~= '1' and seq > tonumber(ARGV[2]) then
      redis.call(ARGV[6], ARGV[7], 'n ' .. ARGV[i + 2])
    end
  end
end

local keep = tonumber(ARGV[5])
local count = redis.call('ZCARD', KEYS[1])
if count > keep then
  local gone = redis.call('ZRANGE', KEYS[1], 0, count - keep - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, count - keep - 1)
  redis.call('HDEL', KEYS[2], unpack(gone))
end

if version > held then
  local before = redis.call('HGET', KEYS[3], 'unread')
  redis.call('HSET', KEYS[3], 'version', ARGV[1], 'read_seq', ARGV[2], 'unread', ARGV[3])
  if before ~= ARGV[3] then
    redis.call(ARGV[6], ARGV[7], 'c ' .. ARGV[3])
  end
end
return OK
