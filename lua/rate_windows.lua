-- rate_windows.lua: one request through three fixed windows of one item: per buyer, per
-- client address and for the whole item. All three keys carry the item's hash tag.
--
-- Only an admitted request is counted: a refused one leaves every window as it was, so one
-- buyer hammering past his own window does not use up the address's or the item's for the
-- other buyers.
--
-- KEYS[1]  {a<activity>.i<item>}:rl:user:<buyer>
-- KEYS[2]  {a<activity>.i<item>}:rl:ip:<address>
-- KEYS[3]  {a<activity>.i<item>}:rl:item
-- ARGV[1]  window length in seconds
-- ARGV[2..4]  the limit of each window, in KEYS order
--
-- Returns: 0 when every window had room (the request is counted in all three), else the
-- 1-based index of the first window that is full (nothing counted). Each key's expiry is
-- set only when its window starts (INCR returned 1).
local window = tonumber(ARGV[1])
local hits = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3])
for i = 1, 3 do
  if (tonumber(hits[i]) or 0) >= tonumber(ARGV[i + 1]) then
    return i
  end
end
for i = 1, 3 do
  if redis.call('INCR', KEYS[i]) == 1 then
    redis.call('EXPIRE', KEYS[i], window)
  end
end
return 0
