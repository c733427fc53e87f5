-- output.lua: keep what a task printed (its output HASH), only while the task exists: a
-- run's last words that come after retention removed its task are dropped, not left
-- behind as a key of nothing.
--
-- KEYS[1] task HASH  KEYS[2] task output HASH
-- ARGV pairs: field, value
-- Returns 1 when written, 0 when the task is gone.

if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], unpack(ARGV))
return 1
