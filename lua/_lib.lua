-- _lib.lua: helpers shared by every script; scripts.py puts this text in front of each.
-- Functions only: no KEYS or ARGV are read here, so every key still arrives through KEYS.

-- Redis TIME in milliseconds: the one clock leases, backoffs and events use.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The time a script works with: ARGV's value when a caller gives one (a test, or the
-- simulator's virtual clock: scheduler/tools/simulate/), else Redis TIME. Timestamps,
-- backoffs, nominations and fault windows accept a given time; leases never do.
local function clock_ms(given)
  if given == '' then return now_ms() end
  return tonumber(given)
end

local function int(n)
  return string.format('%d', n)
end

-- redis.call(command, key, args...) for a list of any length, in calls of at most 4000
-- arguments (unpack is bounded by Lua's stack; 4000 keeps pairs together); the replies
-- of calls that return lists are concatenated.
local function call_all(command, key, args)
  local out = {}
  for i = 1, #args, 4000 do
    local reply = redis.call(command, key, unpack(args, i, math.min(i + 3999, #args)))
    if type(reply) == 'table' then
      for j = 1, #reply do out[#out + 1] = reply[j] end
    end
  end
  return out
end

-- Tasks were made claimable: wake a worker waiting for work (SchedulingQueue.wait_for_work
-- blocks on this list). A few tokens at most wait in it, so a list nobody reads stays small.
local function wake(key)
  redis.call('LPUSH', key, '1')
  redis.call('LTRIM', key, 0, 7)
end

-- Events (docs/events.md). Each change is announced as one JSON object, published on the
-- namespace's pub/sub channel and appended, with the same text, to its stream (XADD, one
-- field "event"), in the call that makes the change. The bound is the config hash's
-- stream_maxlen (STREAM_MAXLEN when unset, scheduler/state/stream.py says the same; 0: no
-- stream), read once per call, when it first announces something; that first XADD trims
-- (MAXLEN ~ bound) and the call's others do not (a trim check per entry costs 15% of an
-- XADD), so the stream holds at most the bound, plus one call's events, plus the entries of
-- a node of the stream that "~" keeps whole.
local STREAM_MAXLEN = 100000

-- A call's events: spec is its events argument, the channel, then optionally "|" and JSON
-- members every event of the call carries (e.g. '"by":"ops"'), placed before "ts".
local function events_to(spec, stream, config)
  local bar = string.find(spec, '|', 1, true)
  if not bar then return {channel = spec, stream = stream, config = config, common = ''} end
  return {channel = string.sub(spec, 1, bar - 1), stream = stream, config = config,
          common = ',' .. string.sub(spec, bar + 1)}
end

-- Announce one event given as its whole JSON text (send builds it from its members).
local function announce(events, text)
  redis.call('PUBLISH', events.channel, text)
  local bound = events.bound
  if not bound then
    bound = tonumber(redis.call('HGET', events.config, 'stream_maxlen') or STREAM_MAXLEN)
    events.bound = bound
    if bound > 0 then redis.call('XADD', events.stream, 'MAXLEN', '~', bound, '*', 'event', text) end
  elseif bound > 0 then
    redis.call('XADD', events.stream, '*', 'event', text)
  end
end

-- Announce one event: head is its JSON members before "ts" (no braces), ts its time as text.
local function send(events, head, ts)
  announce(events, '{' .. head .. events.common .. ',"ts":' .. ts .. '}')
end

-- Announce one event given as name/value pairs in the order they appear (ids and names are
-- validated: no quoting needed beyond cjson's), and its time (ms).
local function emit(events, fields, ts)
  local parts = {}
  for i = 1, #fields, 2 do
    local value = fields[i + 1]
    if type(value) == 'number' then value = int(value) else value = cjson.encode(value) end
    parts[#parts + 1] = '"' .. fields[i] .. '":' .. value
  end
  send(events, table.concat(parts, ','), int(ts))
end

-- Who did what (docs/security.md): an entry at the end of a history list, of which the
-- list keeps its last `keep` (trimmed only once it has more: most calls are one RPUSH).
local function remember(key, keep, entry)
  if redis.call('RPUSH', key, entry) > keep then redis.call('LTRIM', key, -keep, -1) end
end

-- The record of an action that a call's arguments describe from args[at] on (Record in
-- scheduler/state/history.py, record_args): how many entries its history keeps, the
-- action, who did it, what it was done to ("job", "node", or "" for the namespace) and
-- its name, the details (a JSON object of strings, whole numbers and booleans), and the
-- number of the details' names that follow, in the order the event lists them.
-- Returns the record and the index of the first argument after it.
local function record_at(args, at)
  local n = tonumber(args[at + 6])
  local order = {}
  for i = 1, n do order[i] = args[at + 6 + i] end
  return {keep = tonumber(args[at]), action = args[at + 1], by = args[at + 2], scope = args[at + 3],
          name = args[at + 4], details = args[at + 5], order = order}, at + 7 + n
end

-- Record an action at time ts in the history list `key` and announce it (an "audit"
-- event: events.md, Audit messages).
local function record(events, key, r, ts)
  remember(key, r.keep, '{"ts":' .. int(ts) .. ',"action":' .. cjson.encode(r.action) .. ',"by":' ..
    cjson.encode(r.by) .. ',"details":' .. r.details .. '}')
  local fields = {'type', 'audit', 'action', r.action}
  if r.scope ~= '' then
    fields[#fields + 1] = r.scope
    fields[#fields + 1] = r.name
  end
  fields[#fields + 1] = 'by'
  fields[#fields + 1] = r.by
  local details = cjson.decode(r.details)
  for _, name in ipairs(r.order) do
    fields[#fields + 1] = name
    fields[#fields + 1] = details[name]
  end
  emit(events, fields, ts)
end

-- Give back exactly what commit.lua took for a live task: the allocation and host ports
-- recorded on the task, its place in the node's task set, and its tallies.
-- k = {node=, node_tasks=, tally_job=, tally_dom=, tally_priority=, changes=, seq=, usage=}.
-- tenant: the task's tenant field, set by commit.lua when it counted the task in the usage
-- hash (nil for a task committed before usage was kept). domains: the task's domains field,
-- the JSON list of tally:dom fields commit.lua counted it under (nil for a task of a job
-- that is not counted by domain); each, and "*", loses one.
local function release(id, name, alloc, ports, priority, k, tenant, domains)
  if redis.call('SREM', k.node_tasks, id) == 1 then
    local counted = tenant and k.usage
    for pair in string.gmatch(alloc or '', '[^,]+') do
      local r, amount = string.match(pair, '^(.-)=(%d+)$')
      redis.call('HINCRBY', k.node, 'alloc:' .. r, -tonumber(amount))
      if counted then
        redis.call('HINCRBY', k.usage, r, -tonumber(amount))
        redis.call('HINCRBY', k.usage, 'tenant:' .. tenant .. ':' .. r, -tonumber(amount))
      end
    end
    if counted then
      redis.call('HINCRBY', k.usage, 'tasks', -1)
      redis.call('HINCRBY', k.usage, 'tenant:' .. tenant .. ':tasks', -1)
    end
    for port in string.gmatch(ports or '', '[^,]+') do
      if redis.call('HGET', k.node, 'port:' .. port) == id then
        redis.call('HDEL', k.node, 'port:' .. port)
      end
    end
    redis.call('HINCRBY', k.node, 'tasks', -1)
    redis.call('ZADD', k.changes, redis.call('INCR', k.seq), name)
  end
  if tonumber(redis.call('ZINCRBY', k.tally_job, -1, name)) <= 0 then redis.call('ZREM', k.tally_job, name) end
  if domains and k.tally_dom then
    local fields = cjson.decode(domains)
    fields[#fields + 1] = '*'
    for _, field in ipairs(fields) do
      if redis.call('HINCRBY', k.tally_dom, field, -1) <= 0 then redis.call('HDEL', k.tally_dom, field) end
    end
  end
  if priority and tonumber(redis.call('HINCRBY', k.tally_priority, priority, -1)) <= 0 then
    redis.call('HDEL', k.tally_priority, priority)
  end
end


-- End one task from wherever it is (finish.lua's step, shared with replace.lua). A pending
-- task leaves every queue and loses its lease, and a preemptor gives back the room its
-- nominated node holds for it (k.node is then that node's hash); a live one gives back what it held
-- (release), and one that failed on its node is counted in faults:<job> in the same step
-- ("<node>|<task>|<version>"), dropping the entries older than k.fault_window ms.
-- k = {task=, node=, node_tasks=, tally_job=, tally_dom=, faults=, fault_window=, queues={the 5
-- queue keys: active, backoff, unschedulable, inflight, waiting}, leases=, tally_priority=,
-- changes=, seq=, usage=, ended= (tasks:ended, which retention counts from)}. expected: the node the caller
-- saw it on ("" while pending); events: where the end is announced (events_to). Returns
-- what finish.lua reports for it (the state it left, "absent", "terminal:<state>" or
-- "elsewhere") and whether it freed room on a node.
local function end_task(id, state, message, expected, k, events, now)
  local cur = redis.call('HMGET', k.task, 'state', 'node', 'alloc', 'ports', 'job', 'priority', 'tenant', 'version',
    'domains', 'nominated_node')
  local was, on = cur[1], cur[2] or ''
  if not was then return 'absent', false end
  if was ~= 'pending' and was ~= 'assigned' and was ~= 'running' then return 'terminal:' .. was, false end
  if (was == 'pending' and expected ~= '') or (was ~= 'pending' and on ~= expected) then return 'elsewhere', false end
  local freed = false
  if was == 'pending' then
    for q = 1, #k.queues do redis.call('ZREM', k.queues[q], id) end
    redis.call('HDEL', k.leases, id)
    if cur[10] and redis.call('HDEL', k.node, 'nom:' .. id) == 1 then
      redis.call('HINCRBY', k.node, 'nominations', -1)
      redis.call('HDEL', k.task, 'nominated_node')
      redis.call('ZADD', k.changes, redis.call('INCR', k.seq), cur[10])
      freed = true
    end
  else
    release(id, on, cur[3], cur[4], cur[6], k, cur[7] or nil, cur[9] or nil)
    freed = true
    if state == 'failed' then
      redis.call('ZADD', k.faults, int(now), on .. '|' .. id .. '|' .. (cur[8] or ''))
      redis.call('ZREMRANGEBYSCORE', k.faults, '-inf', int(now - k.fault_window))
    end
  end
  redis.call('HSET', k.task, 'state', state, 'ended_at', int(now), 'message', message)
  redis.call('ZADD', k.ended, int(now), id)
  emit(events, {'type', 'task', 'id', id, 'job', cur[5] or '', 'state', state, 'node', on}, now)
  return was, freed
end


-- Whether a task that ended is its slot's outcome, kept with its job by retention (scored
-- inf in job:<id>:ended): a batch or sysbatch task that completed, or failed with no retry
-- queued (retried: a task of the job replaces it). A batch job's outcomes are its results;
-- a sysbatch job's say where it ran to its end, which it does once per node.
local function slot_outcome(kind, state, retried)
  return (kind == 'batch' or kind == 'sysbatch') and (state == 'completed' or (state == 'failed' and not retried))
end


-- Retention (docs/redis-keys.md, Retention): where a job stands once its ended tasks are
-- counted in job:<id>:ended. It is finished when none of its tasks is open (pending or
-- live) and it is stopped, or is a batch job with tasks: then it waits in jobs:finished
-- (scored by when it finished), or, with its own ttl_after_finished, in jobs:expiring
-- (scored by when it goes), with finished_at on its hash, and its finish is announced
-- once. Otherwise, if it has ended tasks that retention may remove (a batch job's
-- slot outcomes, scored inf, stay with it), it waits in jobs:ended scored by when the
-- oldest of them ended, or 0 when it has more than g.per_job of them.
-- j = {id=, job=, tasks=, ended=}; g = {jobs_ended=, finished=, expiring=, per_job=,
-- retention= (ms, job_retention: the finished event's remove_at), now=}; spec: the job's spec
-- decoded, or nil to read it; at: when it finished, if it did (ms).
-- Returns 'finished' (just now), 'kept' (finished before), 'open' or 'gone'.
local function settle(j, g, spec, at, events)
  local f = redis.call('HMGET', j.job, 'status', 'spec', 'finished_at', 'version', 'failure', 'failed_slots')
  if not f[1] then
    redis.call('ZREM', g.jobs_ended, j.id)
    redis.call('ZREM', g.finished, j.id)
    redis.call('ZREM', g.expiring, j.id)
    return 'gone'
  end
  spec = spec or cjson.decode(f[2])
  local total = redis.call('ZCARD', j.tasks)
  if total - redis.call('ZCARD', j.ended) <= 0 and (f[1] == 'stopped' or (spec.type == 'batch' and total > 0)) then
    redis.call('ZREM', g.jobs_ended, j.id)
    if f[3] then return 'kept' end
    -- The status job ls shows (job_status in Python): failed with a reason (deadline,
    -- dependency), stopped, or a batch job complete when enough slots completed.
    local status = 'complete'
    if f[5] and f[5] ~= '' then
      status = 'failed'
    elseif f[1] == 'stopped' then
      status = 'stopped'
    elseif redis.call('ZCOUNT', j.ended, 'inf', 'inf') - (tonumber(f[6]) or 0) < (tonumber(spec.replicas) or 1) then
      status = 'failed'
    end
    redis.call('HSET', j.job, 'finished_at', int(at), 'finished_status', status)
    local ttl, remove_at = tonumber(spec.ttl_after_finished), nil
    if ttl then
      remove_at = at + ttl * 1000
      redis.call('ZADD', g.expiring, int(remove_at), j.id)
    else
      remove_at = at + g.retention
      redis.call('ZADD', g.finished, int(at), j.id)
    end
    emit(events, {'type', 'job', 'id', j.id, 'event', 'finished', 'version', tonumber(f[4]),
      'status', status, 'remove_at', remove_at}, g.now)
    return 'finished'
  end
  if f[3] then
    redis.call('HDEL', j.job, 'finished_at', 'finished_status')
    redis.call('ZREM', g.finished, j.id)
    redis.call('ZREM', g.expiring, j.id)
  end
  local first = redis.call('ZRANGEBYSCORE', j.ended, '-inf', '(inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #first == 0 then
    redis.call('ZREM', g.jobs_ended, j.id)
  elseif redis.call('ZCOUNT', j.ended, '-inf', '(inf') > g.per_job then
    redis.call('ZADD', g.jobs_ended, 0, j.id)
  else
    redis.call('ZADD', g.jobs_ended, first[2], j.id)
  end
  return 'open'
end


-- Disruption budgets (docs/budgets.md): whether a task counts among its job's healthy ones,
-- as scheduler/control/budgets.py counts them: running, and healthy by its checks or of a
-- job without a health check (checked: the budget hash's "checked" field, "1" or "0").
local function counted_healthy(state, health, checked)
  return state == 'running' and (health == 'healthy' or checked ~= '1')
end
