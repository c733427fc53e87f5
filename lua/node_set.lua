-- node_set.lua: change a node's availability (active, pause, drain) or status (ready, down).
-- Becoming active or ready is a cluster event (tasks waiting for room may now fit).
--
-- KEYS[1] node HASH
-- KEYS[2] nodes:changes ZSET
-- KEYS[3] nodes:seq STRING
-- KEYS[4] q:cycle STRING
-- KEYS[5] q:move_cycle STRING
-- KEYS[6] nodes:epoch STRING
-- KEYS[7] stream STREAM (the namespace's events)
-- KEYS[8] config HASH (stream_maxlen)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] node name
-- ARGV[3] field: "availability" or "status"
-- ARGV[4] new value
-- Returns the previous value, or false when the node does not exist.

local before = redis.call('HGET', KEYS[1], ARGV[3])
if not before then return false end
if before ~= ARGV[4] then
  redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), ARGV[2])
  redis.call('INCR', KEYS[6])
  if ARGV[4] == 'active' or ARGV[4] == 'ready' then
    redis.call('SET', KEYS[5], redis.call('GET', KEYS[4]) or '0')
  end
  emit(events_to(ARGV[1], KEYS[7], KEYS[8]), {'type', 'node', 'name', ARGV[2], ARGV[3], ARGV[4]}, now_ms())
end
return before
