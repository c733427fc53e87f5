-- start.lua: a node's agent begins running a task assigned to it.
-- Only an assigned task that is still on this node starts; anything else (stopped,
-- lost, replaced while it waited in the node's RQ queue) must not run.
--
-- A start resent after its reply was lost (a failover) must not read as a refusal: the
-- caller's token, kept on the task, makes the resent call answer 1 again.
--
-- KEYS[1] task HASH
-- KEYS[2] stream STREAM (the namespace's events)
-- KEYS[3] config HASH (stream_maxlen)
-- ARGV[1] node name
-- ARGV[2] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[3] token of this run ('' for none)
-- Returns 1 when the task is now running (by this call, or by this run's token), 0 when
-- it must not run.

local cur = redis.call('HMGET', KEYS[1], 'state', 'node', 'job', 'id', 'start_token')
local token = ARGV[3] or ''
if token ~= '' and cur[1] == 'running' and cur[2] == ARGV[1] and cur[5] == token then return 1 end
if cur[1] ~= 'assigned' or cur[2] ~= ARGV[1] then return 0 end
local now = now_ms()
redis.call('HSET', KEYS[1], 'state', 'running', 'started_at', int(now))
if token ~= '' then redis.call('HSET', KEYS[1], 'start_token', token) end
emit(events_to(ARGV[2], KEYS[2], KEYS[3]), {'type', 'task', 'id', cur[4], 'job', cur[3], 'state', 'running', 'node', ARGV[1]},
  now)
return 1
