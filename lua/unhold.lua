-- unhold.lua: let the tasks of a job held by its `after` dependencies be scheduled, a chunk
-- at a time. The first call removes the job's `held` field (from then on enqueue.lua puts
-- its new tasks in q:active), records when (`released`) and announces it; every call
-- moves the job's tasks from index ARGV[3] on, at most ARGV[4] of them, from q:waiting to
-- q:active with the score they had there, and wakes a worker. The call that reaches the
-- end of the job's tasks takes the job out of jobs:held. Each call is idempotent (a task
-- no longer in q:waiting is left alone), so a releaser that dies part way is followed by
-- the next upkeep, which starts over.
--
-- KEYS[1] job:<id>        HASH
-- KEYS[2] jobs:held       ZSET  job -> when it began waiting (ms)
-- KEYS[3] q:waiting       ZSET
-- KEYS[4] q:active        ZSET
-- KEYS[5] job:<id>:tasks  ZSET  task id -> index
-- KEYS[6] q:wake          LIST
-- KEYS[7] stream          STREAM  the namespace's events
-- KEYS[8] config          HASH  stream_maxlen
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] job id
-- ARGV[3] the first task index to look at
-- ARGV[4] at most this many tasks per call
-- Returns {tasks moved, the next index to look at, or -1 when the job's tasks are all done}.

local now = now_ms()
if redis.call('HDEL', KEYS[1], 'held') == 1 then
  redis.call('HSET', KEYS[1], 'released', int(now))
  emit(events_to(ARGV[1], KEYS[7], KEYS[8]), {'type', 'job', 'id', ARGV[2], 'event', 'released'}, now)
end
local limit = tonumber(ARGV[4])
local ids = redis.call('ZRANGEBYSCORE', KEYS[5], ARGV[3], '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
local moved, last = 0, -1
for i = 1, #ids, 2 do
  local score = redis.call('ZSCORE', KEYS[3], ids[i])
  if score then
    redis.call('ZREM', KEYS[3], ids[i])
    redis.call('ZADD', KEYS[4], score, ids[i])
    moved = moved + 1
  end
  last = tonumber(ids[i + 1])
end
if moved > 0 then wake(KEYS[6]) end
if #ids < 2 * limit then
  redis.call('ZREM', KEYS[2], ARGV[2])
  return {moved, -1}
end
return {moved, int(last + 1)}
