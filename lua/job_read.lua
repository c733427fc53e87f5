-- job_read.lua: one job as `sched job show` and GET /v1/jobs/{id} answer it, in one reply
-- (state/job_reads.py), with the namespace's newest event id read in the same step (the
-- events after it are exactly the changes since: a blocking query's index). Reads only.
-- The tasks' states follow in a second call (task_states.lua), as their keys are known
-- only from this one's reply.
--
-- KEYS[1] job:<id> HASH        KEYS[2] job:<id>:tasks ZSET    KEYS[3] job:<id>:history LIST
-- KEYS[4] stream STREAM        KEYS[5] jobs:expiring ZSET     KEYS[6] jobs:finished ZSET
-- KEYS[7] config HASH
-- ARGV[1] job id    ARGV[2] "1": with the job's history (its audit trail), "0": without
-- Returns {newest event id ("0-0": none), the job hash as field/value pairs (none: no such
-- job), its task ids in index order, its history entries, its jobs:expiring score or false,
-- its jobs:finished score or false, the config's job_retention or false}.

local newest = redis.call('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)
local fields = redis.call('HGETALL', KEYS[1])
if #fields == 0 then
  return {newest[1] and newest[1][1] or '0-0', {}, {}, {}, false, false, false}
end
local history = {}
if ARGV[2] == '1' then history = redis.call('LRANGE', KEYS[3], 0, -1) end
return {newest[1] and newest[1][1] or '0-0', fields, redis.call('ZRANGE', KEYS[2], 0, -1), history,
        redis.call('ZSCORE', KEYS[5], ARGV[1]), redis.call('ZSCORE', KEYS[6], ARGV[1]),
        redis.call('HGET', KEYS[7], 'job_retention')}
