-- fields.lua: the same fields of many hashes in one call (a pipeline of HMGETs costs a
-- client far more: each reply is parsed on its own).
--
-- KEYS[1 ..] hashes
-- ARGV[1 ..] field names
-- Returns one list of values per hash, in order (false for a missing field).

local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('HMGET', KEYS[i], unpack(ARGV))
end
return out
