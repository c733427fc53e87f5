-- task_health.lua: record a running task's health (starting, healthy, unhealthy), as its
-- node's agent sees it, if the task still runs there. Publishes the change.
--
-- KEYS[1] task HASH
-- KEYS[2] stream STREAM (the namespace's events)
-- KEYS[3] config HASH (stream_maxlen)
-- ARGV[1] node name
-- ARGV[2] health
-- ARGV[3] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[4] what the last check said ("" to leave it)
-- Returns 1 when the health changed, 0 otherwise (the same, or the task no longer runs there).

local cur = redis.call('HMGET', KEYS[1], 'state', 'node', 'health', 'id', 'job')
if cur[1] ~= 'running' or cur[2] ~= ARGV[1] then return 0 end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'health_check', ARGV[4]) end
if cur[3] == ARGV[2] then return 0 end
local now = now_ms()
redis.call('HSET', KEYS[1], 'health', ARGV[2], 'health_at', int(now))
emit(events_to(ARGV[3], KEYS[2], KEYS[3]), {'type', 'health', 'id', cur[4], 'job', cur[5], 'health', ARGV[2], 'node', ARGV[1]},
  now)
return 1
