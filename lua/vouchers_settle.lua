--[[
  Ends an unpaid order: paid, cancelled by its buyer, or expired by its delay-queue job.
  Exactly one of the three wins; cancel and expiry give the stock back and let the buyer
  order again, once.

  Input:
    KEYS[1] order: order hash
    KEYS[2] voucher: voucher hash
    KEYS[3] buyers: buyers set
    KEYS[4] events: order stream
    ARGV[1] outcome: PAID | CANCELLED | EXPIRED
    ARGV[2] now_ms: now, epoch ms
    ARGV[3] buyer: acting buyer id ("" for the expiry job)
    ARGV[4] channel: stock channel
    ARGV[5] order: order id
    ARGV[6] keep_seconds: seconds to keep the order hash
    ARGV[7] publish: the publish command: SPUBLISH on a Redis Cluster, PUBLISH on one node

  Output: { status, order status now }
    status (lua/include/status.lua) OK changed, ALREADY settled before (order status
           unchanged), MISSING no such order here (the caller asks SQL), NOT_FOUND not the
           buyer's order, NOT_YET expiry before pay-by (retry later)

  Payment after pay-by expires the order instead (the expiry job may simply not have run).
  Events: XADD an OrderEvent {type=settled, order, voucher, buyer, status, at, created,
          pay_by} (src/features/vouchers/events.rs);
          PUBLISH the stock when it comes back.
]]
-- @include status.lua
local order = redis.call('HMGET', KEYS[1], 'status', 'buyer', 'voucher', 'created', 'pay_by')
local status, buyer = order[1], order[2]
if not status then
  return {MISSING, ''}
end
if ARGV[3] ~= '' and ARGV[3] ~= buyer then
  return {NOT_FOUND, status}
end
if status ~= 'UNPAID' then
  return {ALREADY, status}
end
local now, outcome = tonumber(ARGV[2]), ARGV[1]
local pay_by = tonumber(order[5])
if outcome == 'PAID' and now > pay_by then
  outcome = 'EXPIRED'
end
if outcome == 'EXPIRED' and now < pay_by then
  return {NOT_YET, status}
end
redis.call('HSET', KEYS[1], 'status', outcome)
redis.call('EXPIRE', KEYS[1], ARGV[6])
if outcome ~= 'PAID' then
  local stock = redis.call('HINCRBY', KEYS[2], 'stock', 1)
  redis.call('SREM', KEYS[3], buyer)
  redis.call(ARGV[7], ARGV[4], stock)
end
redis.call('XADD', KEYS[4], '*', 'type', 'settled', 'order', ARGV[5], 'voucher', order[3],
  'buyer', buyer, 'status', outcome, 'at', now, 'created', order[4], 'pay_by', order[5])
return {OK, outcome}
