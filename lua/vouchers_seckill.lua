--[[
  One flash-sale attempt: window, one order per person, stock, then the order (seed 004,
  with every key passed in rather than built in the script).

  Input:
    KEYS[1] voucher hash   {sale:S}:voucher:<id>   fields stock, begins, ends, pay_within
    KEYS[2] buyers set     {sale:S}:voucher:<id>:buyers   (live orders only)
    KEYS[3] order hash     {sale:S}:order:<order id>
    KEYS[4] order stream   {sale:S}:orders
    ARGV[1] voucher id   ARGV[2] buyer id   ARGV[3] order id (allocated before the call)
    ARGV[4] now, epoch ms (the server's clock, not Redis's)   ARGV[5] stock channel

  Output: { status, stock left, pay by (epoch ms) }
    status 0 ordered, -1 voucher unknown here (caller rebuilds it or NOT_FOUND),
           -2 NOT_STARTED, -3 ENDED, -4 ALREADY_ORDERED, -5 SOLD_OUT

  Events: XADD {type=created, order, voucher, buyer, created, pay_by}; PUBLISH the stock.
]]
local now = tonumber(ARGV[4])
local voucher = redis.call('HMGET', KEYS[1], 'stock', 'begins', 'ends', 'pay_within')
if not voucher[1] then
  return {-1, 0, 0}
end
if now < tonumber(voucher[2]) then
  return {-2, tonumber(voucher[1]), 0}
end
if now >= tonumber(voucher[3]) then
  return {-3, tonumber(voucher[1]), 0}
end
if redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 1 then
  return {-4, tonumber(voucher[1]), 0}
end
if tonumber(voucher[1]) <= 0 then
  return {-5, 0, 0}
end
local stock = redis.call('HINCRBY', KEYS[1], 'stock', -1)
redis.call('SADD', KEYS[2], ARGV[2])
local pay_by = now + tonumber(voucher[4]) * 1000
redis.call('HSET', KEYS[3], 'voucher', ARGV[1], 'buyer', ARGV[2], 'status', 'UNPAID',
  'created', now, 'pay_by', pay_by)
redis.call('XADD', KEYS[4], '*', 'type', 'created', 'order', ARGV[3], 'voucher', ARGV[1],
  'buyer', ARGV[2], 'created', now, 'pay_by', pay_by)
redis.call('PUBLISH', ARGV[5], stock)
return {0, stock, pay_by}
