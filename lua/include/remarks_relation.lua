-- Shared by remarks_like.lua and remarks_unlike.lua (included by build.rs).

-- Reads a voter's relation to a remark. Returns (author, relation, voted) with relation '1' or
-- '0' and voted whether the voter may have voted on the remark before (false only when that is
-- known not to be so: no key is left of a young remark, or the archive holds no vote), or
-- (nil, status) when the caller must act first or stop: NOT_FOUND the remark is deleted or
-- hidden (`remarks_withdraw.lua`), MISSING rebuild the remark's info from SQL,
-- ASK_ARCHIVE ask the archive (the relation key is gone and the remark is old, or Redis was
-- rebuilt).
local function read_relation(info_key, relation_key, known)
  if redis.call('HEXISTS', info_key, 'gone') == 1 then
    return nil, NOT_FOUND
  end
  local author = redis.call('HGET', info_key, 'author')
  if not author then
    return nil, MISSING
  end
  local relation = redis.call('GET', relation_key)
  if relation then
    return author, relation, true
  end
  if known == 'young' and redis.call('HGET', info_key, 'hydrated') then
    known = 'unknown'
  end
  if known == 'unknown' then
    return nil, ASK_ARCHIVE
  end
  if known == 'young' or known == 'none' then
    return author, '0', false
  end
  return author, (known == 'liked') and '1' or '0', true
end

-- Appends a changed vote to `stream` as a VoteEvent (src/features/remarks/events.rs), packed
-- (src/infra/streams/mod.rs): its field names in one field, its values in that field's value.
local function add_vote_event(stream, remark, voter, author, voting, likes, at, first)
  redis.call('XADD', stream, '*', 'remark voter author voting count at first',
    table.concat({remark, voter, author, voting, likes, at, first}, ' '))
end
