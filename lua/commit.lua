-- commit.lua: apply a batch of placements, re-checking each one (Nomad's plan applier).
-- Workers plan optimistically against their own copy of the nodes; this is the one
-- serialised step. Each placement is checked with exactly the rule of scheduler/fit.py,
-- in the same order, against the node as it is now, and applied only if it holds:
-- lease still held by this claim, node exists, status ready, availability active,
-- room in every resource, host ports free, max_per_node. Room nominated for a preemptor
-- of the same or higher priority (of another job, not yet expired) counts as taken.
-- Refusals are partial: the rest of the batch still commits. A placed task's own
-- nomination on the node, if any, is released.
--
-- KEYS[1] q:inflight      ZSET
-- KEYS[2] q:leases        HASH
-- KEYS[3] tally:tasks     ZSET  node -> tasks on it
-- KEYS[4] nodes:changes   ZSET  node -> change sequence
-- KEYS[5] nodes:seq       STRING
-- KEYS[6] tally:priority  HASH  priority -> live tasks (preemption looks here first)
-- KEYS[7 .. 6+R]          free:<resource> ZSET for each resource name in ARGV
-- then 4 keys per placement p (0-based), from b = 7+R:
--   KEYS[b+4p] task HASH, KEYS[b+4p+1] node HASH, KEYS[b+4p+2] node tasks SET,
--   KEYS[b+4p+3] tally:job:<job> ZSET
-- ARGV[1] fencing token
-- ARGV[2] events channel
-- ARGV[3] R, then R resource names
-- then per placement: task id, node name, job id, max_per_node, priority, n, n x (resource
--   index (1-based, into the names), amount), m, m x host port
-- Returns {now, results, changes}: results has one entry per placement, 1 when assigned,
-- else the reason it was refused (the words scheduler/reasons.py uses); changes lists
-- node name, new change sequence, previous change sequence for every node this call
-- changed (a worker whose copy was current at the previous sequence need not read it back).

local now = now_ms()
local nowtxt = int(now)
local token, channel = ARGV[1], ARGV[2]
local R = tonumber(ARGV[3])
local names = {}
for r = 1, R do names[r] = ARGV[3 + r] end
local kb = 7 + R

-- Decode the placements first, so the leases can be read in one call.
local plans = {}
local a = 4 + R
while a <= #ARGV do
  local plan = {id = ARGV[a], name = ARGV[a + 1], job = ARGV[a + 2], max_per_node = tonumber(ARGV[a + 3]),
                priority = tonumber(ARGV[a + 4]), req = {}, ports = {}}
  local n = tonumber(ARGV[a + 5])
  a = a + 6
  for i = 1, n do
    plan.req[i] = {tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 1]}
    a = a + 2
  end
  local m = tonumber(ARGV[a])
  a = a + 1
  for i = 1, m do
    plan.ports[i] = ARGV[a]
    a = a + 1
  end
  local base = kb + 4 * #plans
  plan.task, plan.node, plan.node_tasks, plan.tally_job = KEYS[base], KEYS[base + 1], KEYS[base + 2], KEYS[base + 3]
  plans[#plans + 1] = plan
end
if #plans == 0 then return {now, {}, {}} end
local ids = {}
for i, plan in ipairs(plans) do ids[i] = plan.id end
local leases = redis.call('HMGET', KEYS[2], unpack(ids))

-- Room held on the node for preemptors that this task must not take: nominations
-- ("priority|expires|job|cpu=500,...|8080,...") of priority >= ours, of another job.
local function held(node, priority, job)
  local room, ports = {}, {}
  local all = redis.call('HGETALL', node)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 4) == 'nom:' then
      local prio, expires, owner, alloc, nports = string.match(all[i + 1], '^(%d+)|(%d+)|([^|]*)|([^|]*)|(.*)$')
      if tonumber(expires) <= now then  -- expired: tidy it away
        redis.call('HDEL', node, all[i])
        redis.call('HINCRBY', node, 'nominations', -1)
      elseif tonumber(prio) >= priority and owner ~= job then
        for r, amount in string.gmatch(alloc, '([^,=]+)=(%d+)') do
          room[r] = (room[r] or 0) + tonumber(amount)
        end
        for port in string.gmatch(nports, '[^,]+') do ports[port] = true end
      end
    end
  end
  return room, ports
end

-- The rule of fit.py. On success returns nil and the node's new values to write.
local function check(plan, lease)
  if lease ~= token then return 'lease expired' end
  local fields = {'status', 'availability', 'nominations', 'tasks'}
  for _, ra in ipairs(plan.req) do
    fields[#fields + 1] = 'cap:' .. names[ra[1]]
    fields[#fields + 1] = 'alloc:' .. names[ra[1]]
  end
  local st = redis.call('HMGET', plan.node, unpack(fields))
  if not st[1] then return 'node removed' end
  if st[1] ~= 'ready' then return 'node down' end
  if st[2] ~= 'active' then
    if st[2] == 'drain' then return 'node drained' end
    return 'node paused'
  end
  local nominated = tonumber(st[3] or '0') > 0
  local room, held_ports = {}, {}
  if nominated then room, held_ports = held(plan.node, plan.priority, plan.job) end
  local writes = {}
  for i, ra in ipairs(plan.req) do
    local r, amount = names[ra[1]], ra[2]
    local cap, used = tonumber(st[3 + 2 * i] or '0'), tonumber(st[4 + 2 * i] or '0')
    if amount > 0 and used + (room[r] or 0) + amount > cap then
      return 'insufficient ' .. r
    end
    writes[#writes + 1] = {r, ra[1], cap, used + amount, amount, ra[3]}
  end
  for _, p in ipairs(plan.ports) do
    if held_ports[p] or redis.call('HEXISTS', plan.node, 'port:' .. p) == 1 then
      return 'host port ' .. p .. ' in use'
    end
  end
  if plan.max_per_node > 0 and
     tonumber(redis.call('ZSCORE', plan.tally_job, plan.name) or '0') >= plan.max_per_node then
    return 'max_per_node reached'
  end
  return nil, writes, tonumber(st[4] or '0'), nominated
end

local results, placed, touched, by_priority = {}, {}, {}, {}
for i, plan in ipairs(plans) do
  local refused, writes, tasks, nominated = check(plan, not placed[plan.id] and leases[i] or false)
  if refused then
    results[i] = refused
  else
    local id, name = plan.id, plan.name
    local node_fields, alloc = {'tasks', tasks + 1}, {}
    for _, w in ipairs(writes) do
      local r, index, cap, used, amount = w[1], w[2], w[3], w[4], w[5]
      if amount > 0 then
        node_fields[#node_fields + 1] = 'alloc:' .. r
        node_fields[#node_fields + 1] = used
        redis.call('ZADD', KEYS[6 + index], cap - used, name)
        alloc[#alloc + 1] = r .. '=' .. w[6]
      end
    end
    for _, port in ipairs(plan.ports) do
      node_fields[#node_fields + 1] = 'port:' .. port
      node_fields[#node_fields + 1] = id
    end
    redis.call('HSET', plan.node, unpack(node_fields))
    if nominated and redis.call('HDEL', plan.node, 'nom:' .. id) == 1 then
      redis.call('HINCRBY', plan.node, 'nominations', -1)
      redis.call('HDEL', plan.task, 'nominated_node')
    end
    redis.call('ZINCRBY', plan.tally_job, 1, name)
    redis.call('ZINCRBY', KEYS[3], 1, name)
    redis.call('SADD', plan.node_tasks, id)
    -- The last attempt's explanation is cleared (a task nominated elsewhere has its
    -- nominated_node cleared by unnominate.lua).
    redis.call('HSET', plan.task, 'state', 'assigned', 'node', name, 'assigned_at', nowtxt,
      'alloc', table.concat(alloc, ','), 'ports', table.concat(plan.ports, ','), 'explanation', '')
    -- Ids and names are validated to plain characters, so the event is built directly.
    redis.call('PUBLISH', channel, '{"type":"task","id":"' .. id .. '","job":"' .. plan.job ..
      '","state":"assigned","node":"' .. name .. '","ts":' .. nowtxt .. '}')
    placed[id] = true
    placed[#placed + 1] = id
    touched[name] = true
    by_priority[plan.priority] = (by_priority[plan.priority] or 0) + 1
    results[i] = 1
  end
end
if #placed > 0 then
  redis.call('ZREM', KEYS[1], unpack(placed))
  redis.call('HDEL', KEYS[2], unpack(placed))
end
for priority, count in pairs(by_priority) do
  redis.call('HINCRBY', KEYS[6], priority, count)
end
local changes, names_touched = {}, {}
for name in pairs(touched) do names_touched[#names_touched + 1] = name end
if #names_touched > 0 then
  local before = redis.call('ZMSCORE', KEYS[4], unpack(names_touched))
  local last = redis.call('INCRBY', KEYS[5], #names_touched)
  local scored = {}
  for i, name in ipairs(names_touched) do
    local seq = last - #names_touched + i
    scored[#scored + 1] = seq
    scored[#scored + 1] = name
    changes[#changes + 1] = name
    changes[#changes + 1] = seq
    changes[#changes + 1] = tonumber(before[i] or '0')
  end
  redis.call('ZADD', KEYS[4], unpack(scored))
end
return {now, results, changes}
