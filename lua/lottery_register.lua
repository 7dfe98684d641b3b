-- lottery_register.lua: the registrations for one lottery item that reached one instance
-- together, in one round trip on the item's hash tag. Each is answered as if it had come
-- alone, in the order given: a buyer named twice is registered by the first and finds
-- himself listed at the second; an address's window counts the ones it let in before.
--
-- Idempotent per (buyer, item): a buyer found in the list is answered with his state and
-- nothing is counted. A refusal leaves nothing behind: the address's window counts only a
-- registration it lets in, and a list the draw has sealed takes no one.
--
-- The address's window works as the buy script's: a fixed window whose expiry is set only
-- when it starts (a window re-armed at every hit would never end under steady traffic).
--
-- The reads come first (the list in one HMGET, each address's window once), the decisions
-- are made in Lua, and the writes come last, one per key, however many registrations share
-- it: so a registration costs the script a few table lookups, not a round of calls.
--
-- KEYS[1]    {a<activity>.i<item>}:lot:regs    hash: buyer id -> 'r' registered, his rank
--                                              once drawn, 'x' revoked
-- KEYS[2]    {a<activity>.i<item>}:lot:sealed  present from the moment the draw reads the list
-- KEYS[3]    {a<activity>.i<item>}:lot:addrs   sorted set: address -> registrations it made,
--                                              for ops to see how concentrated they are (one
--                                              farm of addresses registering thousands of
--                                              buyers shows as a few members with large scores)
-- KEYS[3+n]  {a<activity>.i<item>}:rl:reg:<address>  the window of registration n's address:
--                                              registrations from it in the window
-- ARGV[1]    window length in seconds
-- ARGV[2]    registrations one address may make per item and window
-- ARGV[3]    when the list expires, in ms since the epoch (the activity's end and a grace)
-- ARGV[2+2n] registration n's buyer id
-- ARGV[3+2n] registration n's client address as the windows count it
--
-- Returns, for each registration in order, a code and a value (flat):
--   0, "r"      registered now
--   1, state    already in the list: his state as stored; nothing counted
--   2, ""       the address's window is full; nothing written
--   3, ""       the draw has sealed the list; nothing written
local count = #KEYS - 3
local buyers = {}
for n = 1, count do
  buyers[n] = ARGV[2 + 2 * n]
end
local states = redis.call('HMGET', KEYS[1], unpack(buyers))
local sealed = redis.call('EXISTS', KEYS[2]) == 1
local limit = tonumber(ARGV[2])

-- Per window key: its count before this call (false when it has not started), and the
-- registrations this call lets in; in the order first met, so the writes are in a fixed order.
local before, admitted, windows = {}, {}, {}
-- Per address: the registrations this call lets in, in the order first met.
local from, addresses = {}, {}
-- The buyers this call lists, as HSET takes them.
local listed, joined = {}, {}
local answers = {}
for n = 1, count do
  local buyer = buyers[n]
  local state = states[n]
  if joined[buyer] then
    state = 'r'
  end
  if state then
    answers[#answers + 1] = 1
    answers[#answers + 1] = state
  elseif sealed then
    answers[#answers + 1] = 3
    answers[#answers + 1] = ''
  else
    local window = KEYS[3 + n]
    if before[window] == nil then
      local hits = redis.call('GET', window)
      before[window] = hits and tonumber(hits) or false
      admitted[window] = 0
      windows[#windows + 1] = window
    end
    local started = before[window] or admitted[window] > 0
    if started and (before[window] or 0) + admitted[window] >= limit then
      answers[#answers + 1] = 2
      answers[#answers + 1] = ''
    else
      admitted[window] = admitted[window] + 1
      joined[buyer] = true
      listed[#listed + 1] = buyer
      listed[#listed + 1] = 'r'
      local address = ARGV[3 + 2 * n]
      if not from[address] then
        from[address] = 0
        addresses[#addresses + 1] = address
      end
      from[address] = from[address] + 1
      answers[#answers + 1] = 0
      answers[#answers + 1] = 'r'
    end
  end
end

if #listed > 0 then
  for _, window in ipairs(windows) do
    if admitted[window] > 0 then
      if before[window] then
        redis.call('INCRBY', window, admitted[window])
      else
        redis.call('SET', window, admitted[window], 'EX', ARGV[1])
      end
    end
  end
  redis.call('HSET', KEYS[1], unpack(listed))
  for _, address in ipairs(addresses) do
    redis.call('ZINCRBY', KEYS[3], from[address], address)
  end
  if redis.call('PEXPIRETIME', KEYS[1]) < 0 then
    redis.call('PEXPIREAT', KEYS[1], ARGV[3])
    redis.call('PEXPIREAT', KEYS[3], ARGV[3])
  end
end
return answers
