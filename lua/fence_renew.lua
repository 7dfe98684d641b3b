-- fence_renew.lua: keeps a re-derivation's fence up a while longer, only for the run that
-- raised it. A run whose fence expired and was raised again by another run learns here
-- that the item is no longer its own, and writes nothing.
--
-- KEYS[1]  {a<activity>.i<item>}:fence   holds the id of the run that raised it
-- ARGV[1]  this run's id
-- ARGV[2]  the new time to live, in milliseconds
--
-- Returns: 1 when the fence is this run's and was renewed, 0 when it is another run's or
--          gone (nothing changed).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
