--[[
  One flash-sale attempt: window, one order per person, stock, then the order, with
  every key passed in rather than built in the script (a key built in Lua cannot be routed
  to its Redis Cluster slot).

  Input:
    KEYS[1] voucher: voucher hash   {sale:S}:voucher:<id>   fields stock, begins, ends, pay_within
    KEYS[2] buyers: buyers set     {sale:S}:voucher:<id>:buyers   (live orders only)
    KEYS[3] order: order hash     {sale:S}:order:<order id>
    KEYS[4] events: order stream   {sale:S}:orders
    ARGV[1] voucher: voucher id
    ARGV[2] buyer: buyer id
    ARGV[3] order: order id (allocated before the call)
    ARGV[4] now_ms: now, epoch ms (the server's clock, not Redis's)
    ARGV[5] channel: stock channel
    ARGV[6] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node

  Output: { status, stock left, pay by (epoch ms) }
    status (lua/include/status.lua) OK ordered, MISSING voucher unknown here (the caller
           rebuilds it from SQL, or answers NOT_FOUND), NOT_YET, ENDED, TAKEN (this buyer
           has an order), SOLD_OUT

  Events: XADD an OrderEvent {type=created, order, voucher, buyer, created, pay_by}
          (src/features/vouchers/events.rs); PUBLISH the stock.
]]
-- @include status.lua
local now = tonumber(ARGV[4])
local voucher = redis.call('HMGET', KEYS[1], 'stock', 'begins', 'ends', 'pay_within')
if not voucher[1] then
  return {MISSING, 0, 0}
end
if now < tonumber(voucher[2]) then
  return {NOT_YET, tonumber(voucher[1]), 0}
end
if now >= tonumber(voucher[3]) then
  return {ENDED, tonumber(voucher[1]), 0}
end
if redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 1 then
  return {TAKEN, tonumber(voucher[1]), 0}
end
if tonumber(voucher[1]) <= 0 then
  return {SOLD_OUT, 0, 0}
end
local stock = redis.call('HINCRBY', KEYS[1], 'stock', -1)
redis.call('SADD', KEYS[2], ARGV[2])
local pay_by = now + tonumber(voucher[4]) * 1000
redis.call('HSET', KEYS[3], 'voucher', ARGV[1], 'buyer', ARGV[2], 'status', 'UNPAID',
  'created', now, 'pay_by', pay_by)
redis.call('XADD', KEYS[4], '*', 'type', 'created', 'order', ARGV[3], 'voucher', ARGV[1],
  'buyer', ARGV[2], 'created', now, 'pay_by', pay_by)
redis.call(ARGV[6], ARGV[5], stock)
return {OK, stock, pay_by}
