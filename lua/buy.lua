-- buy.lua: the whole Redis side of one buy request in one round trip, on one item's hash
-- tag: the stored answer of its request id, the three rate windows, the claim and the
-- deduction (units, or all the chosen seats or none), each within the per-user limit.
--
-- A refused request leaves nothing behind: a replay changes nothing, a full window counts
-- nothing, and a stock refusal claims nothing (its request id stays free for a retry). Only
-- a request the windows admit is counted in them, and only a deduction stores the
-- in-flight marker under the request id, in the same step, so a replay of a request that
-- may have deducted always finds it.
--
-- Every deduction leaves a marker under its order id until reconciliation finds the order
-- committed in PostgreSQL; a deduction whose pre-order never commits (its reply lost, the
-- server gone) is found by its marker and given back. While a reconciliation run fences
-- the item (KEYS[8] exists) nothing is deducted, so the run sees every deduction it must
-- account for.
--
-- Every deduction appends "<buyer> <order id>" to the holders' log (KEYS[10]): an instance that
-- refuses the item from memory keeps its holders, and reads only the entries appended since
-- the last one it read, in place of the whole buyer records. The order id makes each entry
-- unique, so an instance finding a different entry (or none) where its last one was learns
-- that Redis lost or went back on its data, and reads the records whole again.
--
-- The item's keys expire with its stock key (the activity's end and a grace, set by the
-- pre-warm): the buyer records and markers this script may create take the stock key's
-- expiry here, in the same call, so a buy pays no round trip of its own for it.
--
-- The steps a call runs are named by letters: `w` the windows, `c` the claim, `d` the
-- deduction (with the claim), `q` the lottery code (docs/lottery.md): the buyer's own code for the
-- item, live, not used; his limit is then his code's units, and the deduction (or, with
-- PostgreSQL deducting, the claim) uses the code in the same step. A first-come buy has no
-- `q` and reads nothing of the lottery's keys. A buy runs `wcd` in one call; with the challenge on (its key
-- is the buyer's, not the item's), `w` first and `cd` after the challenge; with the deduction
-- switch on `db`, PostgreSQL deducts and the script only claims (`wc`, or `w` then `c`).
--
-- KEYS[1]  {a<activity>.i<item>}:idem:<buyer>:<request id>   stored answer or in-flight marker
-- KEYS[2]  {a<activity>.i<item>}:rl:user:<buyer>
-- KEYS[3]  {a<activity>.i<item>}:rl:ip:<address>
-- KEYS[4]  {a<activity>.i<item>}:rl:item
-- KEYS[5]  {a<activity>.i<item>}:stock     remaining units (absent until pre-warmed)
-- KEYS[6]  {a<activity>.i<item>}:bought    hash: buyer id -> units that buyer holds
-- KEYS[7]  {a<activity>.i<item>}:pending   hash: order id -> "<deducted at ms> <buyer> <units>[ <seat>...]"
-- KEYS[8]  {a<activity>.i<item>}:fence     present while a reconciliation run holds the item
-- KEYS[9]  {a<activity>.i<item>}:seats     hash: seat code -> '' (free) or holder's buyer id
-- KEYS[10] {a<activity>.i<item>}:holders   list: "<buyer> <order id>" of every deduction, in order
-- KEYS[11] {a<activity>.i<item>}:lot:codes hash: buyer -> "<code> <valid from ms> <expires ms> <units>"
-- KEYS[12] {a<activity>.i<item>}:lot:used  set: buyers whose code bought
-- ARGV[1]  the steps to run: any of `w`, `c`, `d`, `q` (the lookup always runs first)
-- ARGV[2]  the in-flight marker stored under KEYS[1] with the deduction
-- ARGV[3]  how long the marker lives, in milliseconds
-- ARGV[4]  window length in seconds
-- ARGV[5..7]  the limit of the buyer, address and item windows
-- ARGV[8]  buyer id
-- ARGV[9]  quantity (>= 1); a seat buy takes one unit per seat instead
-- ARGV[10] per-user limit
-- ARGV[11] order id of the pre-order the deduction is for
-- ARGV[12] the buyer's lottery code (`q`), else empty
-- ARGV[13] now, in ms since the epoch, as the code's lifetime is judged (`q`), else 0
-- ARGV[14..]  seat codes, distinct (a seat buy), or none (a units buy)
--
-- Returns a pair {code, value} (value a string):
--   { 1, stored}  the request id was seen before: its stored answer, or the in-flight marker
--   { 2, "<i>"}   window i (1 buyer, 2 address, 3 item) is full
--   { 3, ""}      admitted by the windows and counted (no `c`)
--   { 4, ""}      claimed, nothing deducted (`c` without `d`)
--   { 0, "<n>"}   deducted and claimed; n units left
--   {-1, "<h>"}   sold out (nothing left) or, for seats, a chosen seat is taken
--   {-2, "<h>"}   already purchased (the buyer holds the limit)
--   {-3, "<h>"}   limit exceeded (this quantity would take the buyer over the limit)
--   {-4, ""}      not pre-warmed (no stock key)
--   {-5, ""}      not enough left for this quantity (some units remain)
--   {-6, ""}      a chosen seat does not exist
--   {-8, ""}      fenced: a reconciliation run holds the item for a moment
--   {-9, ""}      no code of this buyer for this item, or another code (`q`)
--   {-10, ""}     his code's lifetime is over (`q`)
-- where h is the units the buyer holds of the item: a holder refused without a stored
-- answer may be replaying the request that won them, whose answer never reached Redis.
local steps = ARGV[1]
-- Lua keeps every number as a double, and prints each one it hands to a command again: the
-- numbers a command takes are handed on as the strings they came in wherever they can be.
-- Every string a call may stop at, read at once: the stored answer, the three windows, the
-- stock and the fence. Each call a script makes into Redis costs about as much as a small
-- command; one read instead of four is a sixth of a buy's calls. (A missing key reads false.)
local seen = redis.call('MGET', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[8])
local stored = seen[1]
if stored then
  return {1, stored}
end

if string.find(steps, 'w', 1, true) then
  for i = 1, 3 do
    if (tonumber(seen[i + 1]) or 0) >= tonumber(ARGV[i + 4]) then
      return {2, tostring(i)}
    end
  end
  -- A window the read above found missing starts here, with its expiry, in one call.
  for i = 1, 3 do
    if seen[i + 1] then
      redis.call('INCR', KEYS[i + 1])
    else
      redis.call('SET', KEYS[i + 1], '1', 'EX', ARGV[4])
    end
  end
end
if not string.find(steps, 'c', 1, true) then
  return {3, ''}
end
local buyer = ARGV[8]
local limit = tonumber(ARGV[10])
local coded = string.find(steps, 'q', 1, true)
if coded then
  local grant = redis.call('HGET', KEYS[11], buyer)
  local code, from, expires, units
  if grant then
    code, from, expires, units = string.match(grant, '^(%S+) (%d+) (%d+) (%d+)$')
  end
  local now = tonumber(ARGV[13])
  if code ~= ARGV[12] or now < tonumber(from) then
    return {-9, ''}
  end
  if redis.call('SISMEMBER', KEYS[12], buyer) == 1 then
    local held = redis.call('HGET', KEYS[6], buyer)
    return {-2, held or '0'}
  end
  if now > tonumber(expires) then
    return {-10, ''}
  end
  limit = math.min(limit, tonumber(units))
end
if not string.find(steps, 'd', 1, true) then
  if coded then
    redis.call('SADD', KEYS[12], buyer)
  end
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return {4, ''}
end

if seen[6] then
  return {-8, ''}
end
local stock = seen[5]
if not stock then
  return {-4, ''}
end
stock = tonumber(stock)
local seated = #ARGV >= 14
local quantity = seated and (#ARGV - 13) or tonumber(ARGV[9])
local units = seated and tostring(quantity) or ARGV[9]
local held = redis.call('HGET', KEYS[6], buyer)
held = held and tonumber(held) or 0
if held >= limit then
  return {-2, tostring(held)}
end
if held + quantity > limit then
  return {-3, tostring(held)}
end
local marker
if seated then
  for i = 14, #ARGV do
    local holder = redis.call('HGET', KEYS[9], ARGV[i])
    if not holder then
      return {-6, ''}
    end
    if holder ~= '' then
      return {-1, tostring(held)}
    end
  end
  local seats = {}
  for i = 14, #ARGV do
    redis.call('HSET', KEYS[9], ARGV[i], buyer)
    seats[#seats + 1] = ARGV[i]
  end
  marker = string.format(' %s', table.concat(seats, ' '))
else
  if stock <= 0 then
    return {-1, tostring(held)}
  end
  if stock < quantity then
    return {-5, ''}
  end
  marker = ''
end
-- Whether both hashes this deduction writes exist already, and so have their expiry (every
-- writer that creates one gives it the stock key's): only a call that creates one has to
-- hand the expiry on.
local created = redis.call('EXISTS', KEYS[6], KEYS[7]) < 2
redis.call('DECRBY', KEYS[5], units)
redis.call('HINCRBY', KEYS[6], buyer, units)
-- Redis's clock in milliseconds, as digits: the seconds, then the first three of the
-- microseconds padded to six.
local now = redis.call('TIME')
local ms = now[1] .. string.sub('00000' .. now[2], -6, -4)
redis.call('HSET', KEYS[7], ARGV[11], ms .. ' ' .. buyer .. ' ' .. units .. marker)
-- The stock key's expiry, read only by a call that creates a key: NX, only a key this call
-- created is still without one; -1, a stock key loaded without an expiry has none to hand on.
local expires_at
local function hand_on_expiry(key)
  expires_at = expires_at or redis.call('PEXPIRETIME', KEYS[5])
  if expires_at > 0 then
    redis.call('PEXPIREAT', key, expires_at, 'NX')
  end
end
if created then
  hand_on_expiry(KEYS[6])
  hand_on_expiry(KEYS[7])
end
if redis.call('RPUSH', KEYS[10], buyer .. ' ' .. ARGV[11]) == 1 then
  hand_on_expiry(KEYS[10])
end
if coded and redis.call('SADD', KEYS[12], buyer) == 1 and redis.call('SCARD', KEYS[12]) == 1 then
  hand_on_expiry(KEYS[12])
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {0, tostring(stock - quantity)}
