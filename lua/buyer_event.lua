-- buyer_event.lua: records one event in a buyer's log of one activity and announces it to
-- every instance, in one step, so an event is never announced without being in the log a
-- resuming stream reads (`Last-Event-ID` resumes without loss: docs/buyer-events.md).
--
-- KEYS[1]  {e<activity>}:u<user>:events   the buyer's log: a stream, one entry per event,
--                                          fields `k` (the event's name) and `d` (its data)
-- ARGV[1]  the event's name (`order`, `registration`)
-- ARGV[2]  the event's data, as JSON
-- ARGV[3]  how long the log outlives its last event, in milliseconds
-- ARGV[4]  most entries the log keeps (the oldest go first)
-- ARGV[5]  the channel every instance listens on
-- ARGV[6]  `<activity> <user>`: whose event it is, as the announcement names him
--
-- Announces `<activity> <user> <entry id> <name> <data>` on ARGV[5].
-- Returns: the entry's id (`<ms>-<seq>`, rising within the log: the stream's event id).
local id = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[4], '*', 'k', ARGV[1], 'd', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PUBLISH', ARGV[5], ARGV[6] .. ' ' .. id .. ' ' .. ARGV[1] .. ' ' .. ARGV[2])
return id
