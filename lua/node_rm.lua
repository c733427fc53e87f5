-- node_rm.lua: forget a node that holds no live tasks, with every key of it.
--
-- KEYS[1] nodes:changes ZSET  KEYS[2] nodes:seq STRING  KEYS[3] nodes:epoch STRING
-- KEYS[4] stream STREAM (the namespace's events)  KEYS[5] config HASH (stream_maxlen)
-- then the node's own keys (Keys.node_keys), starting: node HASH, node tasks SET
-- then the keys that hold node names (Keys.node_indexes: SETs and HASHes), starting: nodes SET
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] node name  ARGV[3] how many own keys
-- Returns 1 when removed, 0 when the node does not exist, -1 when it still has tasks.
-- The node stays in nodes:changes, with a new sequence number: that is how the workers'
-- copies of the nodes learn it is gone.

local name, owned = ARGV[2], tonumber(ARGV[3])
if redis.call('EXISTS', KEYS[6]) == 0 then return 0 end
if redis.call('SCARD', KEYS[7]) > 0 then return -1 end
for i = 6, 5 + owned do redis.call('DEL', KEYS[i]) end
for i = 6 + owned, #KEYS do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind == 'set' then redis.call('SREM', KEYS[i], name)
  elseif kind == 'hash' then redis.call('HDEL', KEYS[i], name) end
end
redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[2]), name)
redis.call('INCR', KEYS[3])
emit(events_to(ARGV[1], KEYS[4], KEYS[5]), {'type', 'node', 'name', name, 'event', 'removed'}, now_ms())
return 1
