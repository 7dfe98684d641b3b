-- rate_windows.lua: one hit in three fixed windows of one item: per buyer, per client
-- address and for the whole item. All three keys carry the item's hash tag.
--
-- KEYS[1]  {a<activity>.i<item>}:rl:user:<buyer>
-- KEYS[2]  {a<activity>.i<item>}:rl:ip:<address>
-- KEYS[3]  {a<activity>.i<item>}:rl:item
-- ARGV[1]  window length in seconds
-- ARGV[2..4]  the limit of each window, in KEYS order
--
-- Returns: 0 when every window still has room, else the 1-based index of the first window
-- over its limit. Each key's expiry is set only when its window starts (INCR returned 1).
local window = tonumber(ARGV[1])
local tripped = 0
for i = 1, 3 do
  local hits = redis.call('INCR', KEYS[i])
  if hits == 1 then
    redis.call('EXPIRE', KEYS[i], window)
  end
  if tripped == 0 and hits > tonumber(ARGV[i + 1]) then
    tripped = i
  end
end
return tripped
