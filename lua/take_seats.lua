-- take_seats.lua: all of a buyer's chosen seats or none, within the buyer's
-- per-user limit, deducting the ticket's stock by the number of seats. Leaves the same
-- marker as deduct_stock.lua (with the seats), and is refused the same way while fenced.
--
-- KEYS[1]  {a<activity>.i<item>}:seats    hash: seat code -> '' (free) or holder's buyer id
-- KEYS[2]  {a<activity>.i<item>}:stock
-- KEYS[3]  {a<activity>.i<item>}:bought   hash: buyer id -> units held
-- KEYS[4]  {a<activity>.i<item>}:pending  hash: order id -> "<ms> <buyer> <units> <seat>..."
-- KEYS[5]  {a<activity>.i<item>}:fence
-- ARGV[1]  buyer id
-- ARGV[2]  per-user limit
-- ARGV[3]  order id of the pre-order
-- ARGV[4..]  seat codes (distinct)
--
-- Returns: >= 0  taken; the stock left afterwards
--          -1    a chosen seat is already taken (nothing changed)
--          -2    already purchased (the buyer holds the limit)
--          -3    limit exceeded (these seats would take the buyer over the limit)
--          -4    not pre-warmed
--          -6    a chosen seat does not exist
--          -8    fenced: a reconciliation run holds the item for a moment
if redis.call('EXISTS', KEYS[5]) == 1 then
  return -8
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  return -4
end
local count = #ARGV - 3
local limit = tonumber(ARGV[2])
local held = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
if held >= limit then
  return -2
end
if held + count > limit then
  return -3
end
for i = 4, #ARGV do
  local holder = redis.call('HGET', KEYS[1], ARGV[i])
  if not holder then
    return -6
  end
  if holder ~= '' then
    return -1
  end
end
local seats = {}
for i = 4, #ARGV do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[1])
  seats[#seats + 1] = ARGV[i]
end
redis.call('HINCRBY', KEYS[3], ARGV[1], count)
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('HSET', KEYS[4], ARGV[3],
  string.format('%d %s %d %s', ms, ARGV[1], count, table.concat(seats, ' ')))
return redis.call('DECRBY', KEYS[2], count)
