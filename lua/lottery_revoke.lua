-- lottery_revoke.lua: ops end one buyer's part in an item's lottery: his registration is
-- marked revoked, and his code, unless it has bought already, is deleted, so the units it
-- reserved are free for the waitlist's next call (`lottery_advance.lua`), which also skips
-- him if he was still waiting.
--
-- KEYS[1]  {a<activity>.i<item>}:lot:regs    hash: buyer -> 'r', rank, or 'x' revoked
-- KEYS[2]  {a<activity>.i<item>}:lot:codes   hash: buyer -> his code
-- KEYS[3]  {a<activity>.i<item>}:lot:used    set: buyers whose code bought
-- KEYS[4]  {a<activity>.i<item>}:lot:gone    sorted set: a buyer revoked after the draw -> his
--                                            rank, so those behind him on the waitlist are told
--                                            their place net of him before his turn comes
-- ARGV[1]  buyer id
--
-- Returns a pair {code, value}:
--   {0, ""}       he is not registered for this item; nothing written
--   {1, state}    revoked now; his state before ('r' or his rank)
--   {2, ""}       revoked before; nothing written
local state = redis.call('HGET', KEYS[1], ARGV[1])
if not state then
  return {0, ''}
end
if state == 'x' then
  return {2, ''}
end
redis.call('HSET', KEYS[1], ARGV[1], 'x')
local rank = tonumber(state)
if rank then
  redis.call('ZADD', KEYS[4], rank, ARGV[1])
  local expires = redis.call('PEXPIRETIME', KEYS[1])
  if expires > 0 then
    redis.call('PEXPIREAT', KEYS[4], expires)
  end
end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 0 then
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return {1, state}
