-- claim_request.lua: the idempotency gate on X-Request-ID (docs/buyer-api.md).
--
-- KEYS[1]  idem:{<buyer>}:<request id>
-- ARGV[1]  the in-flight marker to store when the id is new
-- ARGV[2]  how long the marker lives, in milliseconds (a crashed request frees the id)
--
-- Returns: false when the id is new (the caller owns it now), else the stored value: the
-- in-flight marker, or the first response to replay byte-for-byte.
local stored = redis.call('GET', KEYS[1])
if stored then
  return stored
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
return false
