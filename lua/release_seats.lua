-- release_seats.lua: give back seats taken by take_seats.lua (a pre-order that could not
-- be written, never a cancelled order). Only seats this buyer holds are freed, so a
-- repeated release changes nothing.
--
-- KEYS[1]  {a<activity>.i<item>}:seats
-- KEYS[2]  {a<activity>.i<item>}:stock
-- KEYS[3]  {a<activity>.i<item>}:bought
-- ARGV[1]  buyer id
-- ARGV[2..]  seat codes
--
-- Returns: the number of seats freed.
local freed = 0
for i = 2, #ARGV do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[1] then
    redis.call('HSET', KEYS[1], ARGV[i], '')
    freed = freed + 1
  end
end
if freed > 0 then
  if redis.call('HINCRBY', KEYS[3], ARGV[1], -freed) <= 0 then
    redis.call('HDEL', KEYS[3], ARGV[1])
  end
  redis.call('INCRBY', KEYS[2], freed)
end
return freed
