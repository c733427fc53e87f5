-- commit.lua: apply a batch of placements, re-checking each one (Nomad's plan applier).
-- Workers plan optimistically against their own copy of the nodes; this is the one
-- serialised step. Each placement is checked with exactly the rule of scheduler/fit.py,
-- in the same order, against the node as it is now (including the placements before it
-- in this call), and applied only if it holds: lease still held by this claim, node
-- exists, status ready, availability active, room in every resource, a free task slot (a
-- node whose agent has "slots" takes that many live tasks; none: no limit), host ports free,
-- max_per_node, taints (every group: a NoSchedule or NoExecute taint the group does not
-- tolerate refuses, and a NoExecute one it tolerates for 0 seconds), the group's domain
-- rules (topology spread, distinct_property, job affinity, job anti-affinity:
-- scheduler/engine/rules.py), then the namespace's quota.
-- Room nominated for a preemptor of the same or
-- higher priority (of another job, not yet expired) counts as taken, one task slot each. Refusals are partial:
-- the rest of the batch still commits, except within a gang group: every placement of a
-- gang group is checked first (each seeing the ones before it), and only if all hold are
-- they applied; a refusal of one refuses them all ("gang <job> refused: <task>: <reason>")
-- and nothing of the gang is written. A placed task's own nomination on the node, if any,
-- is released. The usage hash (namespace and per-tenant totals) grows by what is placed.
--
-- Each node is read once and written once per call, however many tasks it takes: its
-- fields and tallies are kept here and written at the end. What the call did to each node
-- goes into nodes:deltas too, one line per node ("seq|previous seq|node|tasks|cpu=..,
-- memory=..|port=task,..", the new totals), all the lines of the call in one member,
-- space-separated, so that other workers can bring their copies up to date without
-- reading the node (not for a node holding nominations, which this call may change in
-- ways a delta does not say).
--
-- KEYS[1] q:inflight      ZSET
-- KEYS[2] q:leases        HASH
-- KEYS[3] nodes:changes   ZSET  node -> change sequence
-- KEYS[4] nodes:seq       STRING
-- KEYS[5] tally:priority  HASH  priority -> live tasks (preemption looks here first)
-- KEYS[6] nodes:deltas    ZSET  one member per call -> its last change sequence
-- KEYS[7] stream          STREAM  the namespace's events
-- KEYS[8] config          HASH  stream_maxlen
-- then for each node i of the N in ARGV: node HASH, node tasks SET
-- then for each group g of the G: tally:job:<job> ZSET of its job
-- then for each placement, in ARGV order: task HASH
-- then the keys the groups' options name by index (tally:dom:<job> HASH of each job a rule
--   counts, rules:gen STRING, nodes:epoch STRING), each once
-- then usage HASH (resource or "tasks" -> namespace total; "tenant:<t>:<resource>")
-- then quota HASH (resource or "tasks" -> the namespace's limit)
-- ARGV[1] fencing token
-- ARGV[2] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[3] namespace name (for the quota reason)
-- ARGV[4] R, then R resource names
-- then N, then N node names
-- then D: 1 when some group's job is counted by domain or has domain rules (nodes' descriptions are read)
-- then G, then per group: job id, max_per_node, priority, tenant, gang (1: all or none),
--   o, o x option (its name, c, c values: below), n, n x (resource index (1-based, into the
--   names), amount), m, m x host port, k, k x (task id, node index (1-based))
-- The group options (none for a job without tolerations or domain rules); K is an index into KEYS:
--   tolerate: 5 per toleration: key, operator (Equal|Exists), value, effect ("" for every effect),
--     toleration_seconds ("" for ever)
--   count: K of the job's tally:dom, K of q:cycle, K of q:move_cycle: its tasks are counted
--     under every domain of their node (scheduler/model/domains.py), each task records what
--     it was counted under (domains), and placing one is a cluster event (tasks waiting for
--     a job affinity, or out of a spread's skew, may now fit)
--   gen: K of rules:gen, the value its selectors were resolved at (else: refused, retried)
--   epoch: K of nodes:epoch, the value its spreads' eligible domains were read at
--   spread: attribute, max_skew, min_domains, self (1: the task counts in its own domain),
--     reason without the attribute, reason over max_skew, J, J x K (tally:dom of the jobs
--     counted), then the eligible domains (the attribute's values)
--   distinct: attribute, limit, reason without the attribute, reason at the limit, K (own tally:dom)
--   affinity: attribute, self (1: the job meets its own selector), reason, J, J x K
--   anti: attribute, reason, J, J x K
-- then (optional) P, then P x (job id, parallelism): jobs with at most that many live tasks
--   at once (their live tasks are the sum of their tally:job, read once per call)
-- ARGV[#ARGV] now (ms), or "" for Redis TIME: a simulation's virtual clock (see clock_ms)
-- Returns {now, results, changes}: results has one entry per placement, 1 when assigned,
-- else the reason it was refused (the words scheduler/reasons.py uses); changes lists
-- node name, new change sequence, previous change sequence for every node this call
-- changed (a worker whose copy was current at the previous sequence need not read it back).

local DELTAS_KEPT = 50000  -- sequence numbers; a worker further behind re-reads the nodes instead

local now = clock_ms(ARGV[#ARGV])
local nowtxt = int(now)
local token, namespace = ARGV[1], ARGV[3]
local events = events_to(ARGV[2], KEYS[7], KEYS[8])
local R = tonumber(ARGV[4])
local names = {}
for r = 1, R do names[r] = ARGV[4 + r] end
local a = 5 + R
local N = tonumber(ARGV[a])
local nodes = {}
for i = 1, N do
  nodes[i] = {name = ARGV[a + i], key = KEYS[7 + 2 * i], tasks_key = KEYS[8 + 2 * i]}
end
a = a + N + 1
local describe = ARGV[a] == '1'
a = a + 1
local G = tonumber(ARGV[a])
a = a + 1
local tally_base = 8 + 2 * N
local task_base = tally_base + G

-- Group options (see the header): tolerations, and the domain rules with their counts.
local NONE = {}
local ARCH = {x86_64 = 'amd64', ['x86-64'] = 'amd64', aarch64 = 'arm64'}
local watchers = {}  -- K of a tally:dom -> the spreads counting it (kept current as this call places)
local spreads = {}
local function keys_at(at, j)
  local out = {}
  for i = 1, j do out[i] = tonumber(ARGV[at + i - 1]) end
  return out
end
local function option(group, name, at, c)
  if name == 'tolerate' then
    group.tolerations = {}
    for i = at, at + c - 1, 5 do
      group.tolerations[#group.tolerations + 1] = {key = ARGV[i], operator = ARGV[i + 1], value = ARGV[i + 2],
                                                   effect = ARGV[i + 3], seconds = tonumber(ARGV[i + 4])}
    end
    return
  end
  if name == 'count' then
    group.count, group.cycle, group.move_cycle = tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
    return
  end
  if name == 'gen' or name == 'epoch' then
    group.expect = group.expect or {}
    group.expect[#group.expect + 1] = {key = tonumber(ARGV[at]), value = ARGV[at + 1], name = name}
    return
  end
  group.rules = group.rules or {}
  local rule = {kind = name, attribute = ARGV[at]}
  if name == 'spread' then
    rule.max_skew, rule.min_domains = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
    rule.self, rule.missing, rule.reason = tonumber(ARGV[at + 3]), ARGV[at + 4], ARGV[at + 5]
    local j = tonumber(ARGV[at + 6])
    rule.keys = keys_at(at + 7, j)
    rule.domains = {}
    for i = at + 7 + j, at + c - 1 do rule.domains[#rule.domains + 1] = ARGV[i] end
    spreads[#spreads + 1] = rule
    for _, k in ipairs(rule.keys) do
      watchers[k] = watchers[k] or {}
      watchers[k][#watchers[k] + 1] = rule
    end
  elseif name == 'distinct' then
    rule.limit, rule.missing, rule.reason, rule.keys = tonumber(ARGV[at + 1]), ARGV[at + 2], ARGV[at + 3],
      {tonumber(ARGV[at + 4])}
  elseif name == 'affinity' then
    rule.self, rule.reason = ARGV[at + 1] == '1', ARGV[at + 2]
    rule.keys = keys_at(at + 4, tonumber(ARGV[at + 3]))
    group.affinities = (group.affinities or 0) + 1
  else  -- anti
    rule.reason = ARGV[at + 1]
    rule.keys = keys_at(at + 3, tonumber(ARGV[at + 2]))
  end
  group.rules[#group.rules + 1] = rule
end

-- A spread's eligible domains and their counts, and the global minimum, kept current.
local function spread_minimum(rule)
  local low, at = nil, 0
  for _, v in ipairs(rule.domains) do
    local c = rule.sums[v]
    if low == nil or c < low then low, at = c, 1 elseif c == low then at = at + 1 end
  end
  rule.low, rule.at_low = low or 0, at
end
local function spread_counted(rule, value, sign)
  local c = rule.sums[value]
  if c == nil then return end
  rule.sums[value] = c + sign
  if sign > 0 then
    if c == rule.low then
      rule.at_low = rule.at_low - 1
      if rule.at_low == 0 then spread_minimum(rule) end
    end
  elseif c + sign < rule.low then
    rule.low, rule.at_low = c + sign, 1
  elseif c + sign == rule.low then
    rule.at_low = rule.at_low + 1
  end
end

-- tally:dom counts as this call sees them: read on first use, plus what it placed.
local dom_base, dom_delta = {}, {}
local function dom_get(k, field)
  local base = dom_base[k]
  if base == nil then
    base = {}
    dom_base[k] = base
  end
  local v = base[field]
  if v == nil then
    v = tonumber(redis.call('HGET', KEYS[k], field) or '0')
    base[field] = v
  end
  local d = dom_delta[k]
  return v + (d and d[field] or 0)
end
local function dom_sum(keys, field)
  local n = 0
  for _, k in ipairs(keys) do n = n + dom_get(k, field) end
  return n
end

-- Decode the groups first, so the leases can be read in one call. Groups of one job
-- (two versions of its spec) share its tasks-per-node counts.
local groups, ids, jobs = {}, {}, {}
for g = 1, G do
  local job = ARGV[a]
  jobs[job] = jobs[job] or {tally = KEYS[tally_base + g], on = {}, placed = {}}
  local group = {job = job, max_per_node = tonumber(ARGV[a + 1]), priority = tonumber(ARGV[a + 2]),
                 tenant = ARGV[a + 3], gang = ARGV[a + 4] == '1',
                 req = {}, ports = {}, on = jobs[job].on, placed = jobs[job].placed}
  local o = tonumber(ARGV[a + 5])
  a = a + 6
  for _ = 1, o do
    local c = tonumber(ARGV[a + 1])
    option(group, ARGV[a], a + 2, c)
    a = a + 2 + c
  end
  local n = tonumber(ARGV[a])
  a = a + 1
  local alloc = {}
  for i = 1, n do
    local index, amount = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
    group.req[i] = {index, amount}
    if amount > 0 then alloc[#alloc + 1] = names[index] .. '=' .. ARGV[a + 1] end
    a = a + 2
  end
  group.alloc = table.concat(alloc, ',')
  local m = tonumber(ARGV[a])
  a = a + 1
  for i = 1, m do
    group.ports[i] = ARGV[a]
    a = a + 1
  end
  group.port_list = table.concat(group.ports, ',')
  local k = tonumber(ARGV[a])
  a = a + 1
  group.tasks = {}
  for i = 1, k do
    ids[#ids + 1] = ARGV[a]
    group.tasks[i] = {ARGV[a], tonumber(ARGV[a + 1])}
    a = a + 2
  end
  groups[g] = group
end
-- parallelism: a job's live tasks (the sum of its tally:job, whose members are at most that
-- many), read on first use and kept with this call's placements.
local parallelism = {}
local P = a < #ARGV and tonumber(ARGV[a]) or 0  -- (the last ARGV is the time)
for i = 1, P do parallelism[ARGV[a + 2 * i - 1]] = tonumber(ARGV[a + 2 * i]) end
local function live_of(job)
  if job.live == nil then
    local on = redis.call('ZRANGE', job.tally, 0, -1, 'WITHSCORES')
    job.live = 0
    for i = 2, #on, 2 do job.live = job.live + tonumber(on[i]) end
  end
  return job.live
end
if #ids == 0 then return {now, {}, {}} end
local leases = call_all('HMGET', KEYS[2], ids)
-- Groups whose selectors or eligible domains were read before labels, rules or nodes
-- changed are refused (and retried); every spread's eligible domains read at once, before
-- this call places anything.
for _, group in ipairs(groups) do
  for _, e in ipairs(group.expect or NONE) do
    if (redis.call('GET', KEYS[e.key]) or '') ~= e.value then
      group.stale = e.name == 'gen' and 'job labels or rules changed since planned' or 'nodes changed since planned'
    end
  end
end
for _, rule in ipairs(spreads) do
  rule.sums = {}
  for _, v in ipairs(rule.domains) do rule.sums[v] = 0 end
  for _, k in ipairs(rule.keys) do
    if #rule.domains > 0 then
      local fields = {}
      for i, v in ipairs(rule.domains) do fields[i] = rule.attribute .. '=' .. v end
      local got = call_all('HMGET', KEYS[k], fields)
      for i, v in ipairs(rule.domains) do rule.sums[v] = rule.sums[v] + tonumber(got[i] or '0') end
    end
  end
  spread_minimum(rule)
end
local usage_key, quota_key = KEYS[#KEYS - 1], KEYS[#KEYS]

-- The namespace's quota and what its live tasks hold (both small hashes).
local quota, used = {}, {}
local q = redis.call('HGETALL', quota_key)
for i = 1, #q, 2 do quota[q[i]] = tonumber(q[i + 1]) end
if next(quota) then
  local fields = {'tasks'}
  for r = 1, R do fields[#fields + 1] = names[r] end
  local u = redis.call('HMGET', usage_key, unpack(fields))
  for i, f in ipairs(fields) do used[f] = tonumber(u[i] or '0') end
end

-- A node's state as this call sees it, read on first use.
local node_fields, alloc_fields = {'status', 'availability', 'nominations', 'tasks', 'slots'}, {}
for r = 1, R do
  alloc_fields[r] = 'alloc:' .. names[r]
  node_fields[#node_fields + 1] = 'cap:' .. names[r]
  node_fields[#node_fields + 1] = alloc_fields[r]
end
local more = #node_fields  -- then taints, and (with describe) the fields its tasks are counted under
node_fields[more + 1] = 'taints'
if describe then node_fields[more + 2] = 'domains' end
local DESCRIPTION = {'hostname', 'role', 'os', 'arch', 'labels', 'engine_labels'}
local function state(node)
  if node.status == nil then
    local st = redis.call('HMGET', node.key, unpack(node_fields))
    node.status, node.availability = st[1] or false, st[2]
    node.nominated = tonumber(st[3] or '0') > 0
    node.tasks = tonumber(st[4] or '0')
    node.slots = tonumber(st[5] or '0')  -- 0: no limit (no agent, or written before slots were kept)
    node.cap, node.used, node.dirty = {}, {}, {}
    for r = 1, R do
      node.cap[r] = tonumber(st[4 + 2 * r] or '0')
      node.used[r] = tonumber(st[5 + 2 * r] or '0')
    end
    node.ports, node.placed = {}, {}
    node.taints = st[more + 1] or false
    if describe then node.domains = st[more + 2] or false end
  end
  return node
end

-- The node's taints as {key, value, effect, text}, parsed on first use.
local function taints_of(node)
  if node.taint_list == nil then
    node.taint_list = {}
    for entry in string.gmatch(node.taints, '%S+') do
      local key, value, effect = string.match(entry, '^([^=:@]+)=?([^:@]*):(%a+)')
      if key then
        node.taint_list[#node.taint_list + 1] = {key = key, value = value, effect = effect,
          text = value ~= '' and (key .. '=' .. value .. ':' .. effect) or (key .. ':' .. effect)}
      end
    end
  end
  return node.taint_list
end

-- How long the group tolerates a taint (scheduler/model/taints.py tolerance_s): false when
-- no toleration does, nil for ever, else the shortest toleration_seconds of those that do.
local function tolerance(group, taint)
  local tolerated, seconds = false, nil
  for _, t in ipairs(group.tolerations or NONE) do
    if (t.effect == '' or t.effect == taint.effect) and (t.key == '' or t.key == taint.key)
        and (t.operator == 'Exists' or t.value == taint.value) then
      tolerated = true
      if t.seconds and (seconds == nil or t.seconds < seconds) then seconds = t.seconds end
    end
  end
  if not tolerated then return false end
  return seconds
end

-- kube's TaintToleration filter: the first NoSchedule or NoExecute taint no toleration of
-- the group tolerates, or a NoExecute one it tolerates for 0 seconds (the task would be
-- evicted as it lands).
local function untolerated(node, group)
  for _, taint in ipairs(taints_of(node)) do
    if taint.effect ~= 'PreferNoSchedule' then
      local seconds = tolerance(group, taint)
      if seconds == false then return 'untolerated taint ' .. taint.text end
      if seconds == 0 then return 'taint ' .. taint.text .. ' tolerated for 0 s' end
    end
  end
  return nil
end

-- The NoExecute taint of the node that evicts a task of the group soonest, and after how
-- many seconds (nil when none will): its placement's event says so.
local function leaving(node, group)
  local soonest, after = nil, nil
  for _, taint in ipairs(taints_of(node)) do
    if taint.effect == 'NoExecute' then
      local seconds = tolerance(group, taint)
      if seconds and (after == nil or seconds < after) then soonest, after = taint.text, seconds end
    end
  end
  return soonest, after
end

-- The node's attribute -> value (as scheduler/model/constraints.py reads them) and the
-- tally:dom fields a task on it is counted under (scheduler/model/domains.py node_domains),
-- with their JSON for the task's domains field: the node hash's own domains field, which
-- every node write since it was kept carries; for a node written before, from its
-- description.
local function domains_of(node)
  if node.attrs == nil then
    local attrs, fields, record = {}, nil, node.domains
    if record then
      fields = cjson.decode(record)
      for _, field in ipairs(fields) do
        local attribute, value = string.match(field, '^([^=]*)=(.*)$')
        attrs[attribute] = value
      end
    else
      local d = redis.call('HMGET', node.key, unpack(DESCRIPTION))
      local hostname = (d[1] and d[1] ~= '') and d[1] or node.name
      local arch = d[4] or 'amd64'
      arch = ARCH[string.lower(arch)] or arch
      attrs = {['node.name'] = node.name, ['node.hostname'] = hostname, ['node.role'] = d[2] or 'worker',
               ['node.platform.os'] = d[3] or 'linux', ['node.platform.arch'] = arch}
      fields = {}
      for _, f in ipairs({'node.name', 'node.hostname', 'node.role', 'node.platform.os', 'node.platform.arch'}) do
        if attrs[f] ~= '' then fields[#fields + 1] = f .. '=' .. attrs[f] end
      end
      for prefix, text in pairs({['node.labels.'] = d[5], ['engine.labels.'] = d[6]}) do
        for k, v in pairs(cjson.decode(text or '{}')) do
          v = tostring(v)
          attrs[prefix .. k] = v
          if v ~= '' then fields[#fields + 1] = prefix .. k .. '=' .. v end
        end
      end
      record = cjson.encode(fields)
    end
    node.attrs, node.fields, node.record = attrs, fields, record
  end
  return node.attrs
end

-- The group's domain rules (scheduler/engine/rules.py domain_misfit), in its order:
-- spreads, distinct_property, affinity, anti-affinity; nil when they all hold.
local function domain_refusal(group, node)
  local attrs = domains_of(node)
  local first = nil
  for _, rule in ipairs(group.rules) do
    local value = attrs[rule.attribute] or ''
    local kind = rule.kind
    if kind == 'spread' then
      if value == '' then return rule.missing end
      local c = rule.sums[value] or dom_sum(rule.keys, rule.attribute .. '=' .. value)
      local low = (#rule.domains == 0 or #rule.domains < rule.min_domains) and 0 or rule.low
      if c + rule.self - low > rule.max_skew then return rule.reason end
    elseif kind == 'distinct' then
      if value == '' then return rule.missing end
      if dom_sum(rule.keys, rule.attribute .. '=' .. value) >= rule.limit then return rule.reason end
    elseif kind == 'affinity' then
      if first == nil then  -- kube's first task: nothing matched anywhere, and it matches itself
        first = true
        for _, other in ipairs(group.rules) do
          if other.kind == 'affinity' and (not other.self or dom_sum(other.keys, '*') > 0) then first = false end
        end
      end
      if value == '' then return rule.reason end
      if not first and dom_sum(rule.keys, rule.attribute .. '=' .. value) <= 0 then return rule.reason end
    elseif value ~= '' and dom_sum(rule.keys, rule.attribute .. '=' .. value) > 0 then  -- anti
      return rule.reason
    end
  end
  return nil
end

-- Room held on the node for preemptors that this task must not take: nominations
-- ("priority|expires|job|cpu=500,...|8080,...") of priority >= ours, of another job; and
-- how many they are (a task slot each).
local function held(key, priority, job)
  local room, ports, count = {}, {}, 0
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 4) == 'nom:' then
      local prio, expires, owner, alloc, nports = string.match(all[i + 1], '^(%d+)|(%d+)|([^|]*)|([^|]*)|(.*)$')
      if tonumber(expires) <= now then  -- expired: tidy it away
        redis.call('HDEL', key, all[i])
        redis.call('HINCRBY', key, 'nominations', -1)
      elseif tonumber(prio) >= priority and owner ~= job then
        count = count + 1
        for r, amount in string.gmatch(alloc, '([^,=]+)=(%d+)') do
          room[r] = (room[r] or 0) + tonumber(amount)
        end
        for port in string.gmatch(nports, '[^,]+') do ports[port] = true end
      end
    end
  end
  return room, ports, count
end

-- The rule of fit.py; nil when the task fits.
local function refusal(group, node, lease)
  if lease ~= token then return 'lease expired' end
  if group.stale then return group.stale end
  if not node.status then return 'node removed' end
  if node.status ~= 'ready' then return 'node down' end
  if node.availability ~= 'active' then
    if node.availability == 'drain' then return 'node drained' end
    return 'node paused'
  end
  local room, held_ports, held_slots = NONE, NONE, 0
  if node.nominated then room, held_ports, held_slots = held(node.key, group.priority, group.job) end
  for _, ra in ipairs(group.req) do
    local index, amount = ra[1], ra[2]
    if amount > 0 and node.used[index] + (room[names[index]] or 0) + amount > node.cap[index] then
      return 'insufficient ' .. names[index]
    end
  end
  if node.slots > 0 and node.tasks + held_slots >= node.slots then
    if node.slots == 1 then return 'node has its 1 task slot in use' end
    return 'node has all ' .. node.slots .. ' task slots in use'
  end
  for _, p in ipairs(group.ports) do
    if held_ports[p] or node.ports[p] or redis.call('HEXISTS', node.key, 'port:' .. p) == 1 then
      return 'host port ' .. p .. ' in use'
    end
  end
  if group.max_per_node > 0 then
    if group.on[node] == nil then
      group.on[node] = tonumber(redis.call('ZSCORE', jobs[group.job].tally, node.name) or '0')
    end
    if group.on[node] >= group.max_per_node then return 'max_per_node reached' end
  end
  if node.taints then
    local taint = untolerated(node, group)
    if taint then return taint end
  end
  if group.rules then
    local broken = domain_refusal(group, node)
    if broken then return broken end
  end
  local limit = parallelism[group.job]
  if limit and live_of(jobs[group.job]) >= limit then
    return 'job ' .. group.job .. ' runs its parallelism of ' .. limit
  end
  if next(quota) then  -- the rule of fit.over_quota
    for _, ra in ipairs(group.req) do
      local r, amount = names[ra[1]], ra[2]
      if amount > 0 and quota[r] and used[r] + amount > quota[r] then
        return 'namespace ' .. namespace .. ' over its ' .. r .. ' quota'
      end
    end
    if quota.tasks and used.tasks + 1 > quota.tasks then return 'namespace ' .. namespace .. ' over its tasks quota' end
  end
  return nil
end

-- Take (sign 1) or give back (sign -1) a placement's room in this call's view.
local function stage(group, node, id, sign)
  for _, ra in ipairs(group.req) do
    local index, amount = ra[1], ra[2]
    if amount > 0 then
      node.used[index] = node.used[index] + sign * amount
      node.dirty[index] = true
      if used[names[index]] then used[names[index]] = used[names[index]] + sign * amount end
    end
  end
  if used.tasks then used.tasks = used.tasks + sign end
  for _, port in ipairs(group.ports) do
    if sign > 0 then node.ports[port] = id else node.ports[port] = nil end
  end
  node.tasks = node.tasks + sign
  if sign > 0 then node.placed[#node.placed + 1] = id else table.remove(node.placed) end
  if group.on[node] then group.on[node] = group.on[node] + sign end
  local job = jobs[group.job]
  if job.live ~= nil then job.live = job.live + sign end
  if group.count then  -- counted by domain: every field of the node, and the total
    local k = group.count
    local attrs = domains_of(node)
    local delta = dom_delta[k] or {}
    dom_delta[k] = delta
    for _, field in ipairs(node.fields) do delta[field] = (delta[field] or 0) + sign end
    delta['*'] = (delta['*'] or 0) + sign
    for _, rule in ipairs(watchers[k] or NONE) do
      local value = attrs[rule.attribute]
      if value then spread_counted(rule, value, sign) end
    end
  end
  group.placed[node] = (group.placed[node] or 0) + sign
  if group.placed[node] == 0 then group.placed[node] = nil end
end

local results, placed, touched, by_priority = {}, {}, {}, {}
local event_keys = nil  -- q:cycle, q:move_cycle when a counted job placed a task
local tenant_use = {}  -- usage hash field -> amount this call adds
local function count(field, amount)
  tenant_use[field] = (tenant_use[field] or 0) + amount
end
local t = 0
for _, group in ipairs(groups) do
  -- First check every placement of the group (each taking its room in this call's view),
  -- then apply them; a gang group is applied only if every one of them held.
  local staged, gang_refusal = {}, nil
  for _, task in ipairs(group.tasks) do
    t = t + 1
    local id = task[1]
    local node = state(nodes[task[2]])
    local refused = refusal(group, node, not placed[id] and leases[t] or false)
    if refused then
      results[t] = refused
      if group.gang and not gang_refusal then gang_refusal = id .. ': ' .. refused end
    else
      stage(group, node, id, 1)
      placed[id] = true
      staged[#staged + 1] = {t, id, node}
    end
  end
  if gang_refusal then
    for i = #staged, 1, -1 do
      local s = staged[i]
      stage(group, s[3], s[2], -1)
      placed[s[2]] = nil
    end
    local first = t - #group.tasks
    for i = first + 1, t do results[i] = 'gang ' .. group.job .. ' refused: ' .. gang_refusal end
    staged = {}
  end
  for _, s in ipairs(staged) do
    local ti, id, node = s[1], s[2], s[3]
    if node.nominated and redis.call('HDEL', node.key, 'nom:' .. id) == 1 then
      redis.call('HINCRBY', node.key, 'nominations', -1)
      redis.call('HDEL', KEYS[task_base + ti], 'nominated_node')
    end
    -- The last attempt's explanation is cleared (a task nominated elsewhere has its
    -- nominated_node cleared by unnominate.lua).
    if group.count then  -- and what it is counted under, which its end takes back
      redis.call('HSET', KEYS[task_base + ti], 'state', 'assigned', 'node', node.name, 'assigned_at', nowtxt,
        'alloc', group.alloc, 'ports', group.port_list, 'explanation', '', 'tenant', group.tenant,
        'domains', node.record)
    else
      redis.call('HSET', KEYS[task_base + ti], 'state', 'assigned', 'node', node.name, 'assigned_at', nowtxt,
        'alloc', group.alloc, 'ports', group.port_list, 'explanation', '', 'tenant', group.tenant)
    end
    -- Ids and names are validated to plain characters, so the event is built directly; a
    -- placement on a node whose NoExecute taint the group tolerates for a while says when
    -- the task will be evicted.
    local leaves, after = nil, nil
    if node.taints and group.tolerations then leaves, after = leaving(node, group) end
    send(events, '"type":"task","id":"' .. id .. '","job":"' .. group.job .. '","state":"assigned","node":"' ..
      node.name .. '"' .. (leaves and (',"taint":"' .. leaves .. '","evict_at":' .. int(now + 1000 * after)) or ''),
      nowtxt)
    placed[#placed + 1] = id
    if not touched[node] then
      touched[node] = true
      touched[#touched + 1] = node
    end
    results[ti] = 1
  end
  -- The group's tallies and usage, once for all its placements.
  local n = #staged
  if n > 0 and group.count then event_keys = {group.cycle, group.move_cycle} end
  if n > 0 then
    by_priority[group.priority] = (by_priority[group.priority] or 0) + n
    local prefix = 'tenant:' .. group.tenant .. ':'
    for _, ra in ipairs(group.req) do
      if ra[2] > 0 then
        count(names[ra[1]], n * ra[2])
        count(prefix .. names[ra[1]], n * ra[2])
      end
    end
    count('tasks', n)
    count(prefix .. 'tasks', n)
  end
end
if #placed == 0 then return {now, results, {}} end

-- Write each changed node once, and each sorted set once.
for _, node in ipairs(touched) do
  local values = {'tasks', node.tasks}
  for r = 1, R do
    if node.dirty[r] then
      values[#values + 1] = alloc_fields[r]
      values[#values + 1] = node.used[r]
    end
  end
  for port, id in pairs(node.ports) do
    values[#values + 1] = 'port:' .. port
    values[#values + 1] = id
  end
  redis.call('HSET', node.key, unpack(values))
  call_all('SADD', node.tasks_key, node.placed)
end
for _, job in pairs(jobs) do
  local on, names_placed = {}, {}
  for node in pairs(job.placed) do on[#on + 1] = node end
  if #on == 1 then
    redis.call('ZINCRBY', job.tally, job.placed[on[1]], on[1].name)
  else  -- one read and one write for all the job's nodes
    for i, node in ipairs(on) do names_placed[i] = node.name end
    local before = call_all('ZMSCORE', job.tally, names_placed)
    local scored = {}
    for i, node in ipairs(on) do
      scored[#scored + 1] = tonumber(before[i] or '0') + job.placed[node]
      scored[#scored + 1] = node.name
    end
    call_all('ZADD', job.tally, scored)
  end
end
call_all('ZREM', KEYS[1], placed)
call_all('HDEL', KEYS[2], placed)
for priority, n in pairs(by_priority) do
  redis.call('HINCRBY', KEYS[5], priority, n)
end
for field, amount in pairs(tenant_use) do
  redis.call('HINCRBY', usage_key, field, amount)
end
for k, delta in pairs(dom_delta) do
  for field, n in pairs(delta) do
    if n ~= 0 and redis.call('HINCRBY', KEYS[k], field, n) <= 0 then redis.call('HDEL', KEYS[k], field) end
  end
end
if event_keys then redis.call('SET', KEYS[event_keys[2]], redis.call('GET', KEYS[event_keys[1]]) or '0') end

-- Each changed node's new change sequence, and its delta.
local names_touched = {}
for i, node in ipairs(touched) do names_touched[i] = node.name end
local before = call_all('ZMSCORE', KEYS[3], names_touched)
local last = redis.call('INCRBY', KEYS[4], #touched)
local changes, scored, deltas = {}, {}, {}
for i, node in ipairs(touched) do
  local seq, previous = last - #touched + i, tonumber(before[i] or '0')
  scored[#scored + 1] = seq
  scored[#scored + 1] = node.name
  changes[#changes + 1] = node.name
  changes[#changes + 1] = seq
  changes[#changes + 1] = previous
  if not node.nominated then
    local allocs, sep = '', ''
    for r = 1, R do
      if node.dirty[r] then
        allocs = allocs .. sep .. names[r] .. '=' .. string.format('%d', node.used[r])
        sep = ','
      end
    end
    local ports = ''
    if next(node.ports) then
      local list = {}
      for port, id in pairs(node.ports) do list[#list + 1] = port .. '=' .. id end
      ports = table.concat(list, ',')
    end
    deltas[#deltas + 1] = string.format('%d|%d|', seq, previous) .. node.name .. '|' ..
                          string.format('%d', node.tasks) .. '|' .. allocs .. '|' .. ports
  end
end
call_all('ZADD', KEYS[3], scored)
if #deltas > 0 then
  -- One member for the whole call: one sorted-set insert instead of one per node.
  redis.call('ZADD', KEYS[6], last, table.concat(deltas, ' '))
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', last - DELTAS_KEPT)
end
return {now, results, changes}
