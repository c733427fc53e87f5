-- capacity.lua: record a capacity answer (scheduler/state/capacity.py): the answer
-- itself (what the dashboard shows), since when each node has been unneeded, when a
-- hook last acted on a scale-up or a scale-down (what the cooldowns count from), and
-- the capacity events of this answer, in one step.
--
-- KEYS[1] capacity  HASH   last (the answer, JSON), digest, at (ms), unneeded (JSON: node ->
--                          since ms), up_at, down_at (ms of the last hook that acted)
-- KEYS[2] stream    STREAM the namespace's events
-- KEYS[3] config    HASH   stream_maxlen
-- ARGV[1] events: channel, and the members every event carries (events_to)
-- ARGV[2] the answer (JSON)
-- ARGV[3] the answer's digest (what it decided, without times)
-- ARGV[4] since when each node has been unneeded (JSON)
-- ARGV[5] what a hook acted on: "", "up", "down" or "up,down"
-- ARGV[6] the time (ms), or "" for Redis TIME
-- ARGV[7..] events to send, each its JSON members without braces and ts
-- Returns the time recorded (ms).

local now = clock_ms(ARGV[6])
redis.call('HSET', KEYS[1], 'last', ARGV[2], 'digest', ARGV[3], 'at', int(now), 'unneeded', ARGV[4])
if string.find(ARGV[5], 'up', 1, true) then redis.call('HSET', KEYS[1], 'up_at', int(now)) end
if string.find(ARGV[5], 'down', 1, true) then redis.call('HSET', KEYS[1], 'down_at', int(now)) end
local events = events_to(ARGV[1], KEYS[2], KEYS[3])
for i = 7, #ARGV do send(events, ARGV[i], int(now)) end
return now
