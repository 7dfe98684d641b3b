-- fence_lower.lua: lowers a re-derivation's fence, only for the run that raised it. An
-- unconditional delete by a run whose fence had expired would lower the fence of the run
-- holding the item now, and let deductions in while that run rewrites the item.
--
-- KEYS[1]  {a<activity>.i<item>}:fence   holds the id of the run that raised it
-- ARGV[1]  this run's id
--
-- Returns: 1 when the fence was this run's and is lowered, 0 when it is another run's or
--          gone (nothing changed).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
