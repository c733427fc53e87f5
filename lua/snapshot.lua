-- snapshot.lua: a job's tasks and the position of the namespace's stream, read in one
-- step, so that following the stream after that position misses and repeats nothing
-- (Client.watch). Read-only. The caller reads the job's task ids first and gives their
-- hashes; a job's task set only grows, so if it now holds more tasks than given, the
-- caller reads the ids again and calls again.
--
-- KEYS[1] job:<id>:tasks  ZSET
-- KEYS[2] stream          STREAM  the namespace's events
-- KEYS[3 ..]              task HASH of each task id the caller read, in that order
-- Returns {0} when the job has tasks the caller did not give, else
-- {1, the stream's last entry id ("0-0" when it is empty), then state and node of each task}.

if redis.call('ZCARD', KEYS[1]) ~= #KEYS - 2 then return {0} end
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
local out = {1, last[1] and last[1][1] or '0-0'}
for i = 3, #KEYS do
  local cur = redis.call('HMGET', KEYS[i], 'state', 'node')
  out[#out + 1] = cur[1] or ''
  out[#out + 1] = cur[2] or ''
end
return out
