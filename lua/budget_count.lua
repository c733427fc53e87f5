-- budget_count.lua: write a job's disruption budget as a count of its tasks found it
-- (scheduler/control/budgets.py, kube's disruption controller), keeping every disruption
-- the count may not have seen. The count read the disrupted set first (`seen`), then the
-- tasks: it left out of `healthy` the seen tasks still live (granted, not yet ended), and
-- drops the seen ones it found ended or whose grant is older than kube's timeout. A task
-- disrupted after the count read the set may have been counted healthy: each one still
-- in the set and not seen takes one from `healthy` here. A count that began before the
-- one already written is not written (a slower worker's).
--
-- KEYS[1] budget:<job> HASH  KEYS[2] budget:<job>:disrupted ZSET  KEYS[3] jobs:budgets ZSET
-- ARGV[1] job id  ARGV[2] when the count began (ms)
-- ARGV[3] expected ("": the job has no budget, or is gone: forget it)  ARGV[4] healthy  ARGV[5] desired
-- ARGV[6] checked ("1": the job has a health check)  ARGV[7] the budget as text ("max_unavailable 1")
-- ARGV[8] n, then n task ids: the disrupted set as the count read it
-- then m, then m task ids to drop from it
-- Returns {1, healthy as written}, or {0} when a later count was written first.

local job, began = ARGV[1], tonumber(ARGV[2])
if ARGV[3] == '' then
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('ZREM', KEYS[3], job)
  return {1, 0}
end
local before = tonumber(redis.call('HGET', KEYS[1], 'counted_at') or '-1')
if before > began then return {0} end
local n = tonumber(ARGV[8])
local seen = {}
for i = 9, 8 + n do seen[ARGV[i]] = true end
local m = tonumber(ARGV[9 + n])
for i = 10 + n, 9 + n + m do redis.call('ZREM', KEYS[2], ARGV[i]) end
local healthy = tonumber(ARGV[4])
for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if not seen[member] then healthy = healthy - 1 end
end
if healthy < 0 then healthy = 0 end
redis.call('HSET', KEYS[1], 'expected', ARGV[3], 'healthy', healthy, 'desired', ARGV[5], 'checked', ARGV[6],
  'budget', ARGV[7], 'counted_at', ARGV[2])
redis.call('ZADD', KEYS[3], began, job)
return {1, healthy}
