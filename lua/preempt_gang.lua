-- preempt_gang.lua: evict the victims chosen for a whole gang and nominate every member to
-- its node, at once (preempt.lua for a set of tasks). Checked first, all or nothing: every
-- member's lease is still held by this claim, every node named is ready and active, and
-- every victim is still live on the node named for it. If any check fails nothing is
-- written. Then each victim ends as "preempted" and gives back what it held (as
-- finish.lua does), and each member returns to the active queue with nominated_node set
-- and its room held on its node as "nom:<task>" until it is placed or the nomination
-- expires. Every event of a member carries "gang".
--
-- KEYS[1] q:inflight  KEYS[2] q:leases  KEYS[3] q:active
-- KEYS[4] nodes:changes  KEYS[5] nodes:seq  KEYS[6] tally:priority HASH  KEYS[7] usage HASH
-- KEYS[8] stream STREAM (the namespace's events)  KEYS[9] config HASH (stream_maxlen)
-- then 3 keys per member: task HASH, its node's HASH, its node's tasks SET
-- then 3 keys per victim: task HASH, tally:job:<its job> ZSET, tally:dom:<its job> HASH
-- KEYS[#KEYS] tasks:ended ZSET (each victim is added, for retention)
-- ARGV[1] fencing token  ARGV[2] events (see events_to in _lib.lua)  ARGV[3] nomination lifetime (ms)
-- ARGV[4] nomination value without its expiry (as preempt.lua's ARGV[6])
-- ARGV[5] the gang (job id)
-- ARGV[6] M, then M pairs: member task id, node name;
-- then pairs per victim: victim task id, node name (a node some member is nominated to).
-- ARGV[#ARGV] now (ms), or "" for Redis TIME: a simulation's virtual clock (see clock_ms)
-- Returns "ok", or why nothing was done: "lease expired", "node removed", "node down",
-- "node drained", "node paused", "victims changed".

local token, lifetime, held, gang = ARGV[1], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local events = events_to(ARGV[2], KEYS[8], KEYS[9])
local now = clock_ms(ARGV[#ARGV])
local M = tonumber(ARGV[6])
local first_member_arg = 7
local first_member_key = 10
local first_victim_arg = first_member_arg + 2 * M
local first_victim_key = first_member_key + 3 * M

local members, nodes = {}, {}
for m = 0, M - 1 do
  local id, name = ARGV[first_member_arg + 2 * m], ARGV[first_member_arg + 2 * m + 1]
  if redis.call('HGET', KEYS[2], id) ~= token then return 'lease expired' end
  members[#members + 1] = {id = id, name = name, task = KEYS[first_member_key + 3 * m]}
  if not nodes[name] then
    nodes[name] = {key = KEYS[first_member_key + 3 * m + 1], tasks = KEYS[first_member_key + 3 * m + 2]}
  end
end
for name, node in pairs(nodes) do
  local st = redis.call('HMGET', node.key, 'status', 'availability')
  if not st[1] then return 'node removed' end
  if st[1] ~= 'ready' then return 'node down' end
  if st[2] ~= 'active' then return st[2] == 'drain' and 'node drained' or 'node paused' end
end

local victims = {}
for a = first_victim_arg, #ARGV - 1, 2 do
  local v = (a - first_victim_arg) / 2
  local task = KEYS[first_victim_key + 3 * v]
  local name = ARGV[a + 1]
  local cur = redis.call('HMGET', task, 'state', 'node', 'alloc', 'ports', 'job', 'priority', 'tenant', 'domains')
  if (cur[1] ~= 'assigned' and cur[1] ~= 'running') or cur[2] ~= name or not nodes[name] then
    return 'victims changed'
  end
  victims[#victims + 1] = {id = ARGV[a], task = task, name = name, tally_job = KEYS[first_victim_key + 3 * v + 1],
    tally_dom = KEYS[first_victim_key + 3 * v + 2], cur = cur}
end

for _, victim in ipairs(victims) do
  local node = nodes[victim.name]
  local keys = {node = node.key, node_tasks = node.tasks, tally_priority = KEYS[6],
    changes = KEYS[4], seq = KEYS[5], usage = KEYS[7], tally_job = victim.tally_job, tally_dom = victim.tally_dom}
  release(victim.id, victim.name, victim.cur[3], victim.cur[4], victim.cur[6], keys, victim.cur[7] or nil,
    victim.cur[8] or nil)
  redis.call('HSET', victim.task, 'state', 'preempted', 'ended_at', int(now), 'message',
    'preempted by gang ' .. gang)
  redis.call('ZADD', KEYS[#KEYS], int(now), victim.id)
  emit(events, {'type', 'task', 'id', victim.id, 'job', victim.cur[5], 'state', 'preempted',
    'node', victim.name, 'by', members[1].id, 'gang', gang}, now)
end

local prio, job, rest = string.match(held, '^(%d+)|([^|]*)|(.*)$')
local value = prio .. '|' .. int(now + lifetime) .. '|' .. job .. '|' .. rest
for _, member in ipairs(members) do
  local node = nodes[member.name]
  if redis.call('HSET', node.key, 'nom:' .. member.id, value) == 1 then
    redis.call('HINCRBY', node.key, 'nominations', 1)
  end
  redis.call('ZADD', KEYS[4], redis.call('INCR', KEYS[5]), member.name)
  redis.call('ZREM', KEYS[1], member.id)
  redis.call('HDEL', KEYS[2], member.id)
  redis.call('HSET', member.task, 'nominated_node', member.name, 'state', 'pending')
  redis.call('ZADD', KEYS[3], redis.call('HGET', member.task, 'qscore'), member.id)
  emit(events, {'type', 'task', 'id', member.id, 'job', job, 'state', 'pending', 'nominated_node', member.name,
    'gang', gang}, now)
end
return 'ok'
