--[[
  Notes a buyer's new order in their recent orders, which `myOrders` merges with SQL's until
  the order consumer has archived it. Written by the request that bought, after
  vouchers_seckill.lua (another slot: the buyer's, not the voucher's).

  Input:
    KEYS[1] recent: the buyer's recent orders zset   {orders:<buyer mod 1024>}:recent:<buyer>   member order id, score created ms
    ARGV[1] order: order id
    ARGV[2] now_ms: now, epoch ms (the order's creation)
    ARGV[3] keep_ms: how long an order stays noted
    ARGV[4] keep_count: how many orders stay noted at most

  Output: OK (lua/include/status.lua)

  Why a window rather than removal once archived: the consumer would then write the buyer's
  slot too, a second Redis write per order on the archive's path; an order noted and also in
  SQL is read once (the merge drops the duplicate), so the window only bounds memory.
]]
-- @include status.lua

local now = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -tonumber(ARGV[4]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return OK
