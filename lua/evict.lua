-- evict.lua: the voluntary-disruption gate (kube's eviction API). May this live task of a
-- job with a disruption budget be taken down now? Granted only if the budget allows one
-- more disruption, and recorded in the same step, so that evictors working at once (two
-- drains, a drain and a rebalance) never take the job below its budget together.
--
-- The budget hash holds the job's count as the workers' upkeep last made it (healthy,
-- desired, expected; budget_count.lua), less every disruption since. A grant for a task
-- counted healthy takes one from `healthy` and records the task in the job's disrupted
-- set (kube's DisruptedPods) until a count that began after it has seen the task end. A
-- task not counted healthy (assigned, starting, unhealthy) takes nothing and may go while
-- the job has its desired healthy tasks (kube's IfHealthyBudget). The caller ends the task
-- next; a task already in the disrupted set was granted before (its evictor may have died
-- before ending it) and is granted again, without counting twice.
--
-- KEYS[1] budget:<job> HASH  KEYS[2] budget:<job>:disrupted ZSET (task id -> when granted, ms)
-- KEYS[3] task HASH  KEYS[4] stream STREAM (the namespace's events)  KEYS[5] config HASH (stream_maxlen)
-- ARGV[1] events: channel, and the members every event carries (see events_to)
-- ARGV[2] task id  ARGV[3] the node the caller saw it on ("": any)  ARGV[4] why (for the event)
-- ARGV[5] how old the count may be (ms)
-- ARGV[6] now (ms), or "" for Redis TIME: a simulation's virtual clock (see clock_ms)
-- Returns {verdict, healthy, desired, expected}: verdict "granted" (counted now), "again"
-- (granted before), "free" (not counted healthy: nothing taken), "refused" (the budget
-- allows no more now), "uncounted" (no count yet), "stale" (the count is older than
-- ARGV[5]), "gone" (not live), "elsewhere" (live on another node than ARGV[3]).

local id, node = ARGV[2], ARGV[3]
local now = clock_ms(ARGV[6])
local t = redis.call('HMGET', KEYS[3], 'state', 'node', 'health', 'job')
if t[1] ~= 'assigned' and t[1] ~= 'running' then return {'gone', 0, 0, 0} end
if node ~= '' and t[2] ~= node then return {'elsewhere', 0, 0, 0} end
local b = redis.call('HMGET', KEYS[1], 'healthy', 'desired', 'expected', 'checked', 'counted_at')
if not b[1] then return {'uncounted', 0, 0, 0} end
local healthy, desired, expected = tonumber(b[1]), tonumber(b[2]), tonumber(b[3])
if redis.call('ZSCORE', KEYS[2], id) then return {'again', healthy, desired, expected} end
if now - tonumber(b[5]) > tonumber(ARGV[5]) then return {'stale', healthy, desired, expected} end
local verdict = 'free'
if counted_healthy(t[1], t[3] or '', b[4]) then
  if healthy - desired < 1 then return {'refused', healthy, desired, expected} end
  healthy = healthy - 1
  redis.call('HSET', KEYS[1], 'healthy', healthy)
  redis.call('ZADD', KEYS[2], now, id)
  verdict = 'granted'
elseif healthy < desired then
  return {'refused', healthy, desired, expected}
end
redis.call('HINCRBY', KEYS[1], 'evictions', 1)
emit(events_to(ARGV[1], KEYS[4], KEYS[5]), {'type', 'job', 'id', t[4], 'event', 'evicted', 'task', id,
  'node', t[2] or '', 'reason', ARGV[4], 'healthy', healthy, 'desired', desired, 'expected', expected}, now)
return {verdict, healthy, desired, expected}
