-- rederive_commit.lua: the last step of a re-derivation behind the fence. The run wrote
-- the item's buyer records, seat map and restore set into staging keys of its own, chunk
-- by chunk (a large item in one MULTI would stall Redis for every sale); this swaps them
-- in at once, with the stock, and clears the markers, only while the fence is this run's.
-- The replaced keys are UNLINKed: freed in the background, however large.
--
-- KEYS[1]  {a<activity>.i<item>}:fence      holds the id of the run that raised it
-- KEYS[2]  {a<activity>.i<item>}:stock
-- KEYS[3]  {a<activity>.i<item>}:bought     hash: buyer id -> units held
-- KEYS[4]  {a<activity>.i<item>}:seats      hash: seat code -> '' or holder
-- KEYS[5]  {a<activity>.i<item>}:restored   set: order ids given back
-- KEYS[6]  {a<activity>.i<item>}:pending    hash: order id -> deduction marker
-- KEYS[7]  the run's staged buyer records   (same hash tag; absent when no buyer holds)
-- KEYS[8]  the run's staged seat map        (absent for an unseated item)
-- KEYS[9]  the run's staged restore set     (absent when nothing was restored)
-- ARGV[1]  this run's id
-- ARGV[2]  the stock PostgreSQL leaves for Redis
-- ARGV[3]  when every written key expires (Unix seconds)
--
-- Returns: 1 when the item was replaced, 0 when the fence is not this run's (nothing
--          written; the staged keys expire by themselves).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('UNLINK', KEYS[3], KEYS[4], KEYS[5], KEYS[6])
for i = 0, 2 do
  local staged, live = KEYS[7 + i], KEYS[3 + i]
  if redis.call('EXISTS', staged) == 1 then
    redis.call('RENAME', staged, live)
    redis.call('EXPIREAT', live, ARGV[3])
  end
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('EXPIREAT', KEYS[2], ARGV[3])
return 1
