-- node_put.lua: register a node, or update its description, keeping what is placed on it.
-- Allocations, host ports and task counts survive an update; capacity is replaced. A node
-- that (re)appears or changes is a cluster event: move_cycle catches up with the cycle.
--
-- KEYS[1] node HASH
-- KEYS[2] nodes SET
-- KEYS[3] nodes:changes ZSET
-- KEYS[4] nodes:seq STRING
-- KEYS[5] q:cycle STRING
-- KEYS[6] q:move_cycle STRING
-- KEYS[7] resources SET
-- KEYS[8] nodes:epoch STRING (bumped: global jobs may need reconciling)
-- KEYS[9] stream STREAM (the namespace's events)
-- KEYS[10] config HASH (stream_maxlen)
-- KEYS[11] nodes:noexecute SET (the node is in it while its taints hold a NoExecute one)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] node name
-- ARGV[3] R, then R pairs (resource name, capacity; "" = the node no longer has it)
-- then field/value pairs of the description (hostname, role, os, arch, labels, ...)
-- Returns 1 when the node is new, 0 when it was updated.

local name = ARGV[2]
local R = tonumber(ARGV[3])
local is_new = redis.call('EXISTS', KEYS[1]) == 0
if is_new then
  redis.call('HSET', KEYS[1], 'name', name, 'availability', 'active', 'status', 'ready', 'tasks', 0)
end
for r = 1, R do
  local resource, cap = ARGV[2 + 2 * r], ARGV[3 + 2 * r]
  if cap == '' then
    redis.call('HDEL', KEYS[1], 'cap:' .. resource)
  else
    redis.call('HSET', KEYS[1], 'cap:' .. resource, cap)
    redis.call('SADD', KEYS[7], resource)
  end
end
for a = 4 + 2 * R, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[a], ARGV[a + 1])
end
redis.call('SADD', KEYS[2], name)
if string.find(redis.call('HGET', KEYS[1], 'taints') or '', ':NoExecute', 1, true) then
  redis.call('SADD', KEYS[11], name)
end
redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[4]), name)
redis.call('INCR', KEYS[8])
redis.call('SET', KEYS[6], redis.call('GET', KEYS[5]) or '0')
emit(events_to(ARGV[1], KEYS[9], KEYS[10]), {'type', 'node', 'name', name, 'event', is_new and 'added' or 'updated'},
  now_ms())
return is_new and 1 or 0
