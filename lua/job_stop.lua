-- job_stop.lua: mark a job stopped and announce it, in one step (its tasks are then ended
-- by finish.lua, each with its own event). A job already stopped is left alone.
--
-- KEYS[1] job:<id>  HASH
-- KEYS[2] stream    STREAM  the namespace's events
-- KEYS[3] config    HASH  stream_maxlen
-- KEYS[4] jobs:ended ZSET  the job is added at 0: retention looks at it next (it may have
--         finished now, if none of its tasks was open)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] job id
-- Returns 1 when the job was running and is now stopped, 0 when it was stopped already,
-- -1 when there is no such job.

local cur = redis.call('HMGET', KEYS[1], 'version', 'status')
if not cur[1] then return -1 end
if cur[2] == 'stopped' then return 0 end
local now = now_ms()
redis.call('HSET', KEYS[1], 'status', 'stopped', 'updated', int(now))
redis.call('ZADD', KEYS[4], 0, ARGV[2])
emit(events_to(ARGV[1], KEYS[2], KEYS[3]), {'type', 'job', 'id', ARGV[2], 'event', 'stopped',
  'version', tonumber(cur[1])}, now)
return 1
