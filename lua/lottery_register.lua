-- lottery_register.lua: one buyer's registration for one lottery item, in one round trip, on
-- the item's hash tag. Idempotent per (buyer, item): a buyer found in the list is answered
-- with his state and nothing is counted. A refusal leaves nothing behind: the address's window
-- counts only a registration it lets in, and a list the draw has sealed takes no one.
--
-- The address's window works as the buy script's: a fixed window whose expiry is set only
-- when it starts (a window re-armed at every hit would never end under steady traffic).
--
-- KEYS[1]  {a<activity>.i<item>}:lot:regs    hash: buyer id -> 'r' registered, his rank once
--                                            drawn, 'x' revoked
-- KEYS[2]  {a<activity>.i<item>}:rl:reg:<address>  registrations from this address in the window
-- KEYS[3]  {a<activity>.i<item>}:lot:sealed  present from the moment the draw reads the list
-- KEYS[4]  {a<activity>.i<item>}:lot:addrs   sorted set: address -> registrations it made, for
--                                            ops to see how concentrated they are (one farm of
--                                            addresses registering thousands of buyers shows
--                                            as a few members with large scores)
-- ARGV[1]  buyer id
-- ARGV[2]  window length in seconds
-- ARGV[3]  registrations one address may make per item and window
-- ARGV[4]  when the list expires, in ms since the epoch (the activity's end and a grace)
-- ARGV[5]  the client's address as the windows count it
--
-- Returns a pair {code, value}:
--   {0, "r"}      registered now
--   {1, state}    already in the list: his state as stored; nothing counted
--   {2, ""}       the address's window is full; nothing written
--   {3, ""}       the draw has sealed the list; nothing written
local state = redis.call('HGET', KEYS[1], ARGV[1])
if state then
  return {1, state}
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {3, ''}
end
local hits = redis.call('GET', KEYS[2])
if hits and tonumber(hits) >= tonumber(ARGV[3]) then
  return {2, ''}
end
if hits then
  redis.call('INCR', KEYS[2])
else
  redis.call('SET', KEYS[2], '1', 'EX', ARGV[2])
end
redis.call('HSET', KEYS[1], ARGV[1], 'r')
redis.call('ZINCRBY', KEYS[4], 1, ARGV[5])
if redis.call('PEXPIRETIME', KEYS[1]) < 0 then
  redis.call('PEXPIREAT', KEYS[1], ARGV[4])
  redis.call('PEXPIREAT', KEYS[4], ARGV[4])
end
return {0, 'r'}
