-- deduct_stock.lua: atomically check an item's stock and the buyer's count against the
-- per-user limit, then deduct, in one script so no other buyer runs in between.
--
-- Every deduction leaves a marker under its order id until reconciliation finds the order
-- committed in PostgreSQL; a deduction whose pre-order never commits (its reply lost, the
-- server gone) is found by its marker and given back. While a reconciliation run fences
-- the item (KEYS[4] exists) nothing is deducted, so the run sees every deduction it must
-- account for.
--
-- KEYS[1]  {a<activity>.i<item>}:stock    remaining units (absent until pre-warmed)
-- KEYS[2]  {a<activity>.i<item>}:bought   hash: buyer id -> units that buyer holds
-- KEYS[3]  {a<activity>.i<item>}:pending  hash: order id -> "<deducted at ms> <buyer> <units>"
-- KEYS[4]  {a<activity>.i<item>}:fence    present while a reconciliation run holds the item
-- ARGV[1]  buyer id
-- ARGV[2]  quantity (>= 1)
-- ARGV[3]  per-user limit
-- ARGV[4]  order id of the pre-order this deduction is for
--
-- Returns: >= 0  deducted; the stock left afterwards
--          -1    sold out (nothing left)
--          -2    already purchased (the buyer holds the limit)
--          -3    limit exceeded (this quantity would take the buyer over the limit)
--          -4    not pre-warmed (no stock key)
--          -5    not enough left for this quantity (some units remain)
--          -8    fenced: a reconciliation run holds the item for a moment
if redis.call('EXISTS', KEYS[4]) == 1 then
  return -8
end
local stock = redis.call('GET', KEYS[1])
if not stock then
  return -4
end
stock = tonumber(stock)
local quantity = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local held = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if held >= limit then
  return -2
end
if held + quantity > limit then
  return -3
end
if stock <= 0 then
  return -1
end
if stock < quantity then
  return -5
end
redis.call('DECRBY', KEYS[1], quantity)
redis.call('HINCRBY', KEYS[2], ARGV[1], quantity)
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('HSET', KEYS[3], ARGV[4], string.format('%d %s %d', ms, ARGV[1], quantity))
return stock - quantity
