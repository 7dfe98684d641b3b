-- restore_stock.lua: give back a deduction made by deduct_stock.lua (a pre-order that
-- could not be written; cancelled orders go through restore_order.lua).
--
-- KEYS[1]  {a<activity>.i<item>}:stock
-- KEYS[2]  {a<activity>.i<item>}:bought
-- ARGV[1]  buyer id
-- ARGV[2]  quantity
--
-- Returns: the stock after the give-back, or -4 when the item is not pre-warmed (nothing
-- is written then: a later pre-warm derives stock from PostgreSQL anyway).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -4
end
local quantity = tonumber(ARGV[2])
local held = redis.call('HINCRBY', KEYS[2], ARGV[1], -quantity)
if held <= 0 then
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return redis.call('INCRBY', KEYS[1], quantity)
