-- restore_order.lua: give a cancelled order's units back to Redis, at most once per order.
-- PostgreSQL has already moved its stock and written the restore journal;
-- this runs after that commit, and again whenever the give-back has to be retried, so the
-- order id is remembered here and a second run gives nothing. The restore set, which this
-- may create, expires with the stock key (the activity's end and a grace).
--
-- KEYS[1]  {a<activity>.i<item>}:stock
-- KEYS[2]  {a<activity>.i<item>}:bought    hash: buyer id -> units held
-- KEYS[3]  {a<activity>.i<item>}:seats     hash: seat code -> '' or holder (seated items)
-- KEYS[4]  {a<activity>.i<item>}:restored  set: order ids already given back
-- ARGV[1]  order id
-- ARGV[2]  buyer id
-- ARGV[3]  quantity (units of a standard item)
-- ARGV[4..]  seat codes of a seated order (none for a standard item)
--
-- Returns: >= 0  given back now; the stock afterwards
--          -4    not pre-warmed (nothing written: a later pre-warm derives stock from
--                PostgreSQL, which already holds the give-back)
--          -7    this order was given back before (nothing written)
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -4
end
if redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 1 then
  return -7
end
local units
if #ARGV > 3 then
  -- Only seats this buyer still holds go back, as in release_seats.lua.
  units = 0
  for i = 4, #ARGV do
    if redis.call('HGET', KEYS[3], ARGV[i]) == ARGV[2] then
      redis.call('HSET', KEYS[3], ARGV[i], '')
      units = units + 1
    end
  end
else
  units = tonumber(ARGV[3])
end
if units > 0 and redis.call('HINCRBY', KEYS[2], ARGV[2], -units) <= 0 then
  redis.call('HDEL', KEYS[2], ARGV[2])
end
redis.call('SADD', KEYS[4], ARGV[1])
local expires_at = redis.call('PEXPIRETIME', KEYS[1])
if expires_at > 0 then
  redis.call('PEXPIREAT', KEYS[4], expires_at, 'NX')
end
return redis.call('INCRBY', KEYS[1], units)
