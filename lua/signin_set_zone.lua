--[[
  Records a user's time zone as SQL has it (src/features/signin/zones.rs): written only
  when it is newer than the one held, so that a late write never undoes a later change.

  Input:
    KEYS[1] zone: the user's zone hash {points:B}:zone:<user>
    ARGV[1] name: the IANA zone
    ARGV[2] previous: the zone before it ('' for none)
    ARGV[3] from_day: first day counted in the zone, YYYYMMDD (0: always)
    ARGV[4] changed_ms: when the change was made, epoch ms

  Output: { status }
    status (lua/include/status.lua) OK written, ALREADY a change as new or newer is held
]]
-- @include status.lua

local held = tonumber(redis.call('HGET', KEYS[1], 'changed_ms') or '-1')
if held >= tonumber(ARGV[4]) then
  return {ALREADY}
end
redis.call('HSET', KEYS[1], 'zone', ARGV[1], 'previous', ARGV[2], 'from', ARGV[3],
  'changed_ms', ARGV[4])
return {OK}
