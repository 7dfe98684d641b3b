-- bloom.lua: add to, or test, a Bloom filter kept as a Redis bitmap.
-- Bit positions are computed by the caller (double hashing), so the script only touches bits.
--
-- KEYS[1]  the bitmap
-- ARGV[1]  'add' or 'test'
-- ARGV[2..]  bit positions
--
-- Returns: for 'add', the number of bits that were newly set; for 'test', 1 when every
-- position is set (maybe present), 0 otherwise (certainly absent), -1 when the bitmap
-- itself is gone (Redis lost its data): then the filter knows nothing.
local add = ARGV[1] == 'add'
if not add and redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local changed = 0
for i = 2, #ARGV do
  local position = tonumber(ARGV[i])
  if add then
    changed = changed + (1 - redis.call('SETBIT', KEYS[1], position, 1))
  elseif redis.call('GETBIT', KEYS[1], position) == 0 then
    return 0
  end
end
if add then
  return changed
end
return 1
