-- preempt.lua: evict victims from a node and nominate the node for the preemptor, at once.
-- Checked first, all or nothing: the preemptor's lease is still held by this claim, the
-- node is ready and active, and every victim is still live on that node. Then each victim
-- ends as "preempted" and gives back what it held (as finish.lua does), and the preemptor
-- returns to the active queue with nominated_node set and its room held on the node as
-- "nom:<task>" until it is placed or the nomination expires.
--
-- KEYS[1] q:inflight  KEYS[2] q:leases  KEYS[3] q:active
-- KEYS[4] nodes:changes  KEYS[5] nodes:seq
-- KEYS[6] preemptor task HASH  KEYS[7] node HASH  KEYS[8] node tasks SET
-- KEYS[9] tally:priority HASH
-- KEYS[10] stream STREAM (the namespace's events)  KEYS[11] config HASH (stream_maxlen)
-- then 3 keys per victim: task HASH, tally:job:<its job> ZSET, tally:dom:<its job> HASH
-- KEYS[#KEYS - 1] usage HASH (namespace and tenant usage, see commit.lua)
-- KEYS[#KEYS] tasks:ended ZSET (each victim is added, for retention)
-- ARGV[1] fencing token  ARGV[2] events (see events_to in _lib.lua)  ARGV[3] preemptor task id
-- ARGV[4] node name  ARGV[5] nomination lifetime (ms)
-- ARGV[6] nomination value without its expiry: priority, job, allocation, ports as
--         "priority|job|cpu=500,memory=...|8080,..." (the expiry is inserted here)
-- ARGV[7 ..] the victim task ids
-- ARGV[#ARGV] now (ms), or "" for Redis TIME: a simulation's virtual clock (see clock_ms)
-- Returns "ok", or why nothing was done: "lease expired", "node removed", "node down",
-- "node drained", "node paused", "victims changed".

local token, id, name = ARGV[1], ARGV[3], ARGV[4]
local events = events_to(ARGV[2], KEYS[10], KEYS[11])
local now = clock_ms(ARGV[#ARGV])
local first_victim = 7

if redis.call('HGET', KEYS[2], id) ~= token then return 'lease expired' end
local st = redis.call('HMGET', KEYS[7], 'status', 'availability')
if not st[1] then return 'node removed' end
if st[1] ~= 'ready' then return 'node down' end
if st[2] ~= 'active' then return st[2] == 'drain' and 'node drained' or 'node paused' end

local victims = {}
for a = first_victim, #ARGV - 1 do
  local v = (a - first_victim) * 3
  local task = KEYS[12 + v]
  local cur = redis.call('HMGET', task, 'state', 'node', 'alloc', 'ports', 'job', 'priority', 'tenant', 'domains')
  if (cur[1] ~= 'assigned' and cur[1] ~= 'running') or cur[2] ~= name then return 'victims changed' end
  victims[#victims + 1] = {id = ARGV[a], task = task, tally_job = KEYS[13 + v], tally_dom = KEYS[14 + v], cur = cur}
end

local keys = {node = KEYS[7], node_tasks = KEYS[8], tally_priority = KEYS[9],
  changes = KEYS[4], seq = KEYS[5], usage = KEYS[#KEYS - 1]}
for _, victim in ipairs(victims) do
  keys.tally_job, keys.tally_dom = victim.tally_job, victim.tally_dom
  release(victim.id, name, victim.cur[3], victim.cur[4], victim.cur[6], keys, victim.cur[7] or nil,
    victim.cur[8] or nil)
  redis.call('HSET', victim.task, 'state', 'preempted', 'ended_at', int(now), 'message', 'preempted by ' .. id)
  redis.call('ZADD', KEYS[#KEYS], int(now), victim.id)
  emit(events, {'type', 'task', 'id', victim.id, 'job', victim.cur[5], 'state', 'preempted', 'node', name, 'by', id},
    now)
end

local prio, job, rest = string.match(ARGV[6], '^(%d+)|([^|]*)|(.*)$')
if redis.call('HSET', KEYS[7], 'nom:' .. id, prio .. '|' .. int(now + tonumber(ARGV[5])) .. '|' .. job .. '|' .. rest) == 1 then
  redis.call('HINCRBY', KEYS[7], 'nominations', 1)
end
redis.call('ZADD', KEYS[4], redis.call('INCR', KEYS[5]), name)
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HSET', KEYS[6], 'nominated_node', name, 'state', 'pending')
redis.call('ZADD', KEYS[3], redis.call('HGET', KEYS[6], 'qscore'), id)
emit(events, {'type', 'task', 'id', id, 'job', job, 'state', 'pending', 'nominated_node', name}, now)
return 'ok'
