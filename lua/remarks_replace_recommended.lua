--[[
  Replaces an item's cached "recommended remarks" list in one step.

  Input:
    KEYS[1] list: the list              {rec:<item>}:list
    KEYS[2] proxy: the proxy key         {rec:<item>}:proxy
    ARGV[1] refresh_seconds: seconds until the next refresh (the proxy key's new lifetime)
    ARGV[2..] remarks: remark ids, most liked first (none: the item has no remarks yet)

  Output: the new length of the list.

  The list itself never expires, so readers always find the previous list while a refresh
  runs; the proxy key decides who refreshes and when. An empty result stores no list and no
  placeholder: the proxy key already says "fresh".
]]
redis.call('DEL', KEYS[1])
for i = 2, #ARGV do
  redis.call('RPUSH', KEYS[1], ARGV[i])
end
redis.call('SET', KEYS[2], '1', 'EX', ARGV[1])
return #ARGV - 1
