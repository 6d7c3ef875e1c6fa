--[[
  One page of the items nearest a point. GEOSEARCH cannot skip: it is asked for the items
  up to the page's end, and only the page goes back to the caller, so a reply holds at most
  the page and one more however deep the page (the caller bounds how deep: the 1,000
  nearest at most).

  Input:
    KEYS[1] locations: item locations (GEO set)   {geo}:items
    ARGV[1] lng: longitude
    ARGV[2] lat: latitude
    ARGV[3] radius_km: radius, km
    ARGV[4] skip: items to skip
    ARGV[5] take: items to return

  Output: { more (1 when items follow the page, else 0), { {id, distance km}, ... } }
]]
local skip, take = tonumber(ARGV[4]), tonumber(ARGV[5])
local found = redis.call('GEOSEARCH', KEYS[1], 'FROMLONLAT', ARGV[1], ARGV[2],
  'BYRADIUS', ARGV[3], 'km', 'ASC', 'COUNT', skip + take + 1, 'WITHDIST')
local more, page = 0, {}
if #found > skip + take then
  more = 1
end
for i = skip + 1, math.min(#found, skip + take) do
  page[#page + 1] = found[i]
end
return {more, page}
