-- fixed_window.lua: count one hit in a fixed time window and report the count.
--
-- KEYS[1]  the window's counter (one key, so any hash tag is trivially shared)
-- ARGV[1]  window length in seconds
--
-- Returns: the number of hits in the current window, this one included.
--
-- The expiry is set only when the counter is created (INCR returned 1). Re-setting it on
-- every hit would make the window slide forever under steady traffic, so a client that
-- keeps trying would never be let through again.
local hits = redis.call('INCR', KEYS[1])
if hits == 1 then
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
end
return hits
