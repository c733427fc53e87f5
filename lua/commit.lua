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
-- Returns {now, result per placement}: 1 when assigned, else the reason it was refused
-- (the same words scheduler/reasons.py uses).

local now = now_ms()
local nowtxt = int(now)
local token, channel = ARGV[1], ARGV[2]
local R = tonumber(ARGV[3])
local names = {}
for r = 1, R do names[r] = ARGV[3 + r] end
local a = 4 + R
local kb = 7 + R
local out = {now}

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

local function check(id, node, tally_job, name, max_per_node, priority, job, req, ports)
  if redis.call('HGET', KEYS[2], id) ~= token then return 'lease expired' end
  local st = redis.call('HMGET', node, 'status', 'availability', 'nominations')
  if not st[1] then return 'node removed' end
  if st[1] ~= 'ready' then return 'node down' end
  if st[2] ~= 'active' then
    if st[2] == 'drain' then return 'node drained' end
    return 'node paused'
  end
  local room, held_ports = {}, {}
  if tonumber(st[3] or '0') > 0 then room, held_ports = held(node, priority, job) end
  for _, ra in ipairs(req) do
    local r, amount = names[ra[1]], ra[2]
    if amount > 0 then
      local v = redis.call('HMGET', node, 'cap:' .. r, 'alloc:' .. r)
      if tonumber(v[2] or '0') + (room[r] or 0) + amount > tonumber(v[1] or '0') then
        return 'insufficient ' .. r
      end
    end
  end
  for _, p in ipairs(ports) do
    if redis.call('HEXISTS', node, 'port:' .. p) == 1 or held_ports[p] then
      return 'host port ' .. p .. ' in use'
    end
  end
  if max_per_node > 0 and tonumber(redis.call('ZSCORE', tally_job, name) or '0') >= max_per_node then
    return 'max_per_node reached'
  end
  return nil
end

local p = 0
while a <= #ARGV do
  local id, name, job = ARGV[a], ARGV[a + 1], ARGV[a + 2]
  local max_per_node, priority = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local n = tonumber(ARGV[a + 5])
  a = a + 6
  local req = {}
  for i = 1, n do
    req[i] = {tonumber(ARGV[a]), tonumber(ARGV[a + 1])}
    a = a + 2
  end
  local m = tonumber(ARGV[a])
  a = a + 1
  local ports = {}
  for i = 1, m do
    ports[i] = ARGV[a]
    a = a + 1
  end
  local base = kb + 4 * p
  local task, node, node_tasks, tally_job = KEYS[base], KEYS[base + 1], KEYS[base + 2], KEYS[base + 3]
  p = p + 1

  local refused = check(id, node, tally_job, name, max_per_node, priority, job, req, ports)
  if refused then
    out[#out + 1] = refused
  else
    local alloc = {}
    for _, ra in ipairs(req) do
      local r, amount = names[ra[1]], ra[2]
      if amount > 0 then
        redis.call('HINCRBY', node, 'alloc:' .. r, amount)
        redis.call('ZINCRBY', KEYS[6 + ra[1]], -amount, name)
        alloc[#alloc + 1] = r .. '=' .. int(amount)
      end
    end
    for _, port in ipairs(ports) do
      redis.call('HSET', node, 'port:' .. port, id)
    end
    redis.call('HINCRBY', node, 'tasks', 1)
    redis.call('ZINCRBY', tally_job, 1, name)
    redis.call('ZINCRBY', KEYS[3], 1, name)
    redis.call('HINCRBY', KEYS[6], priority, 1)
    redis.call('SADD', node_tasks, id)
    redis.call('HSET', task, 'state', 'assigned', 'node', name, 'assigned_at', nowtxt,
      'alloc', table.concat(alloc, ','), 'ports', table.concat(ports, ','))
    redis.call('HDEL', task, 'explanation', 'nominated_node')
    if redis.call('HDEL', node, 'nom:' .. id) == 1 then redis.call('HINCRBY', node, 'nominations', -1) end
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZADD', KEYS[4], redis.call('INCR', KEYS[5]), name)
    publish(channel, {'type', 'task', 'id', id, 'job', job, 'state', 'assigned', 'node', name, 'ts', now})
    out[#out + 1] = 1
  end
end
return out
