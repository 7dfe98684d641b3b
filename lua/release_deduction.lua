-- release_deduction.lua: give back a deduction whose pre-order will never commit (refused
-- by PostgreSQL, failed, or voided by reconciliation), at most once: the deduction's marker
-- is the proof it is still owed, and this script removes it.
--
-- KEYS[1]  {a<activity>.i<item>}:stock
-- KEYS[2]  {a<activity>.i<item>}:bought   hash: buyer id -> units held
-- KEYS[3]  {a<activity>.i<item>}:seats    hash: seat code -> '' or holder (seated items)
-- KEYS[4]  {a<activity>.i<item>}:pending  the markers buy.lua leaves
-- ARGV[1]  order id
-- ARGV[2]  '1': the units go back to stock; '0': they stay spent (PostgreSQL had no stock
--          left for them, so Redis was over by as much); the buyer's record and seats go
--          back either way
--
-- Returns: >= 0  the units released now
--          -7    no marker: never deducted, released before, or settled as committed
local marker = redis.call('HGET', KEYS[4], ARGV[1])
if not marker then
  return -7
end
redis.call('HDEL', KEYS[4], ARGV[1])
local fields = {}
for field in string.gmatch(marker, '%S+') do
  fields[#fields + 1] = field
end
local buyer = fields[2]
local units = tonumber(fields[3])
for i = 4, #fields do
  if redis.call('HGET', KEYS[3], fields[i]) == buyer then
    redis.call('HSET', KEYS[3], fields[i], '')
  end
end
if redis.call('HINCRBY', KEYS[2], buyer, -units) <= 0 then
  redis.call('HDEL', KEYS[2], buyer)
end
if ARGV[2] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('INCRBY', KEYS[1], units)
end
return units
