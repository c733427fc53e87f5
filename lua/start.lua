-- start.lua: a node's agent begins running a task assigned to it.
-- Only an assigned task that is still on this node starts; anything else (stopped,
-- lost, replaced while it waited in the node's RQ queue) must not run.
--
-- KEYS[1] task HASH
-- ARGV[1] node name
-- ARGV[2] events channel
-- Returns 1 when the task is now running, 0 when it must not run.

local cur = redis.call('HMGET', KEYS[1], 'state', 'node', 'job', 'id')
if cur[1] ~= 'assigned' or cur[2] ~= ARGV[1] then return 0 end
local now = now_ms()
redis.call('HSET', KEYS[1], 'state', 'running', 'started_at', int(now))
publish(ARGV[2], {'type', 'task', 'id', cur[4], 'job', cur[3], 'state', 'running', 'node', ARGV[1], 'ts', now})
return 1
