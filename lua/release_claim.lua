-- release_claim.lua: frees a request id whose request was refused after its claim (its
-- pre-order refused or failed), so a retry runs the buy again; a request leaves no key
-- behind unless it won.
--
-- Only the request's own in-flight marker is deleted: a marker is unique to its request
-- (it names its pre-order), so neither a stored answer nor a later claim of the same id
-- (after this one's marker expired) is ever removed.
--
-- KEYS[1]  {a<activity>.i<item>}:idem:<buyer>:<request id>
-- ARGV[1]  the in-flight marker this request stored
--
-- Returns: 1 when the marker was deleted, 0 when the key held something else or nothing.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
