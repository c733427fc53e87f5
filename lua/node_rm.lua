-- node_rm.lua: forget a node that holds no live tasks.
--
-- KEYS[1] node HASH
-- KEYS[2] nodes SET
-- KEYS[3] node tasks SET
-- KEYS[4] nodes:changes ZSET
-- KEYS[5] nodes:seq STRING
-- KEYS[6] heartbeat key
-- KEYS[7] nodes:epoch STRING
-- KEYS[8] stream STREAM (the namespace's events)
-- KEYS[9] config HASH (stream_maxlen)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] node name
-- Returns 1 when removed, 0 when the node does not exist, -1 when it still has tasks.

local name = ARGV[2]
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('SCARD', KEYS[3]) > 0 then return -1 end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[6])
redis.call('SREM', KEYS[2], name)
redis.call('ZADD', KEYS[4], redis.call('INCR', KEYS[5]), name)
redis.call('INCR', KEYS[7])
emit(events_to(ARGV[1], KEYS[8], KEYS[9]), {'type', 'node', 'name', name, 'event', 'removed'}, now_ms())
return 1
