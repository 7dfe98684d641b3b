-- lottery_advance.lua: hands the units no live code holds to the next buyers on an item's
-- waitlist, each a code of his own, in the draw's order. Run by the leader a few times a
-- second while the sale is on; atomic, so a buy, a cancellation or a revocation running at
-- the same moment is counted either wholly before or wholly after.
--
-- A unit is free when it is in the stock and no live code reserves it. A code reserves its
-- units until it is used (its buyer in the used set: what he did not buy is free again) or
-- its lifetime ends; a revoked code is gone from the codes hash. So an expired code, a winner
-- who bought less than his code allowed, a cancelled order's units (given back to the stock)
-- and a revocation all free units, and the next call hands them on.
--
-- KEYS[1]  {a<activity>.i<item>}:stock       units left (absent until pre-warmed: nothing done)
-- KEYS[2]  {a<activity>.i<item>}:lot:codes   hash: buyer -> "<code> <valid from ms> <expires ms> <units>"
-- KEYS[3]  {a<activity>.i<item>}:lot:used    set: buyers whose code bought
-- KEYS[4]  {a<activity>.i<item>}:lot:queue   list: the waitlist, next first
-- KEYS[5]  {a<activity>.i<item>}:lot:regs    hash: buyer -> rank, or 'x' revoked (skipped)
-- KEYS[6]  {a<activity>.i<item>}:lot:turns   how many ranks have had their turn
-- KEYS[7]  {a<activity>.i<item>}:lot:drawn   present once the draw's result is all here
-- ARGV[1]  now, ms since the epoch
-- ARGV[2]  a new code's first valid ms (the later of now and the sale's start)
-- ARGV[3]  a new code's last valid ms
-- ARGV[4]  units a code may buy at most (the per-user limit)
-- ARGV[5..]  fresh codes, one per buyer this call may reach at most
--
-- Returns a flat list, five strings per code handed out: buyer, code, valid from ms,
-- expires ms, units.
if redis.call('EXISTS', KEYS[7]) == 0 then
  return {}
end
local stock = tonumber(redis.call('GET', KEYS[1]) or '')
if not stock then
  return {}
end
local now = tonumber(ARGV[1])
local reserved = 0
local codes = redis.call('HGETALL', KEYS[2])
for i = 1, #codes, 2 do
  local expires, units = string.match(codes[i + 1], '^%S+ %d+ (%d+) (%d+)$')
  if tonumber(expires) >= now and redis.call('SISMEMBER', KEYS[3], codes[i]) == 0 then
    reserved = reserved + tonumber(units)
  end
end
local free = stock - reserved
local limit = tonumber(ARGV[4])
local issued = {}
local fresh = 5
while free > 0 and fresh <= #ARGV do
  local buyer = redis.call('LPOP', KEYS[4])
  if not buyer then
    break
  end
  redis.call('INCR', KEYS[6])
  if redis.call('HGET', KEYS[5], buyer) ~= 'x' then
    local units = tostring(math.min(free, limit))
    redis.call('HSET', KEYS[2], buyer, ARGV[fresh] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. units)
    issued[#issued + 1] = buyer
    issued[#issued + 1] = ARGV[fresh]
    issued[#issued + 1] = ARGV[2]
    issued[#issued + 1] = ARGV[3]
    issued[#issued + 1] = units
    fresh = fresh + 1
    free = free - tonumber(units)
  end
end
return issued
