-- claim.lua: lease up to N tasks from the head of the active queue.
-- The tasks move to q:inflight scored by their lease deadline (Redis TIME + lease),
-- and each is recorded in the leases hash with this claim's fencing token. The token is
-- the new value of the scheduling-cycle counter, so it also tells the failure path
-- whether a cluster event happened after the claim (kube's moveRequestCycle rule).
--
-- KEYS[1] q:active       ZSET  task id -> queue score (priority, then age)
-- KEYS[2] q:inflight     ZSET  task id -> lease deadline (ms)
-- KEYS[3] q:leases       HASH  task id -> fencing token
-- KEYS[4] q:cycle        STRING scheduling cycle counter
-- ARGV[1] how many tasks at most
-- ARGV[2] lease length (ms)
-- ARGV[3] share with other workers ("" not to): take half of what is waiting, but at
--         least this many (and at most ARGV[1]), so that a short queue is worked on by
--         several workers at once instead of by whichever claims first.
-- ARGV[4] keep a job together, up to this many more tasks ("" or 0 not to): when the
--         claim ends inside a job (the next waiting tasks are of the job of the last one
--         taken, as a task id "<job>.<index>" says), take those too, so that one worker
--         places the job in one pass instead of two workers placing parts of it against
--         each other.
-- With fairness (KEYS[5..8] given, ARGV[5] = the cluster's capacity per resource as
-- "cpu=8000,memory=...", ARGV[6] = how far into q:active to look):
-- KEYS[5] jobs:shares  HASH  job -> "tenant|gang size|cpu=500,memory=..." (one task's needs)
-- KEYS[6] tenants      HASH  tenant -> weight (unlisted: 1)
-- KEYS[7] usage        HASH  "tenant:<t>:<resource>" -> what the tenant's live tasks hold
-- the claim looks at the first ARGV[6] waiting tasks and, when they belong to more than
-- one tenant, takes them by dominant resource fairness: repeatedly the next task (in
-- queue order: priority, then age) of the tenant whose dominant share (the largest of its
-- usage / capacity over resources, plus what this claim already gave it, divided by its
-- weight) is smallest. A gang's waiting tasks are taken together, whatever the limits
-- (the tail rule below does the same without fairness).
-- ARGV[#ARGV] now (ms), or "" for Redis TIME: a simulation's virtual clock (see clock_ms); the lease
--         deadline is always Redis TIME + lease, so no caller's clock makes a lease last longer
-- Returns {now_ms} when the queue is empty, else {now_ms, token, tasks still waiting, task id, ...}.

local now = clock_ms(ARGV[#ARGV])
local count = tonumber(ARGV[1])
if ARGV[3] and ARGV[3] ~= '' then
  local half = math.ceil(redis.call('ZCARD', KEYS[1]) / 2)
  count = math.min(count, math.max(tonumber(ARGV[3]), half))
end
local fair = KEYS[5] ~= nil
local info = {}  -- job -> {tenant, gang, needs}, read on first use
local function decode(job, row)
  local tenant, gang, needs = string.match(row or '', '^([^|]*)|(%d+)|(.*)$')
  info[job] = {tenant = tenant or 'default', gang = tonumber(gang or '0'), needs = needs or ''}
end
local function job_info(jobs)
  local missing = {}
  for _, job in ipairs(jobs) do
    if info[job] == nil and not missing[job] then missing[#missing + 1] = job; missing[job] = true end
  end
  if #missing == 0 or not fair then return end
  local rows = redis.call('HMGET', KEYS[5], unpack(missing))
  for i, job in ipairs(missing) do decode(job, rows[i]) end
end
local function job_of(id) return string.match(id, '^(.+)%.%d+$') end

-- The rows of the window's jobs, checked first on their raw "tenant|" prefix: most claims
-- see one tenant, and then there is nothing to order (and no row to decode).
local function one_tenant(window, jobs)
  local distinct, seen = {}, {}
  for i, id in ipairs(window) do
    local job = job_of(id) or id
    jobs[i] = job
    if not seen[job] then seen[job] = true; distinct[#distinct + 1] = job end
  end
  local rows = call_all('HMGET', KEYS[5], distinct)
  local first, same = nil, true
  for i = 1, #distinct do
    local row = rows[i]
    local bar = row and string.find(row, '|', 1, true)
    local prefix = bar and string.sub(row, 1, bar) or 'default|'
    first = first or prefix
    if prefix ~= first then same = false; break end
  end
  if same then return true end
  for i, job in ipairs(distinct) do decode(job, rows[i]) end
  return false
end

local popped
if fair then
  local window = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[6]) - 1)
  local jobs, by_tenant, order = {}, {}, {}
  if one_tenant(window, jobs) then window = {} end
  for i, id in ipairs(window) do
    local tenant = info[jobs[i]].tenant
    if not by_tenant[tenant] then by_tenant[tenant] = {next = 1}; order[#order + 1] = tenant end
    local list = by_tenant[tenant]
    list[#list + 1] = i
  end
  if #order > 1 then
    local capacity = {}
    for r, amount in string.gmatch(ARGV[5], '([^,=]+)=(%d+)') do capacity[r] = tonumber(amount) end
    local weights, usage = {}, {}
    local w = redis.call('HGETALL', KEYS[6])
    for i = 1, #w, 2 do weights[w[i]] = tonumber(w[i + 1]) end
    local u = redis.call('HGETALL', KEYS[7])
    for i = 1, #u, 2 do usage[u[i]] = tonumber(u[i + 1]) end
    local share, given = {}, {}  -- tenant -> dominant share; tenant -> resource -> claimed here
    local function dominant(tenant)
      local top = 0
      for r, cap in pairs(capacity) do
        if cap > 0 then
          local f = ((usage['tenant:' .. tenant .. ':' .. r] or 0) + ((given[tenant] or {})[r] or 0)) / cap
          if f > top then top = f end
        end
      end
      local weight = weights[tenant] or 1
      if weight <= 0 then weight = 1 end
      return top / weight
    end
    for _, tenant in ipairs(order) do given[tenant] = {}; share[tenant] = dominant(tenant) end
    popped = {}
    local taken = 0
    while taken < count do
      local best
      for _, tenant in ipairs(order) do
        local list = by_tenant[tenant]
        if list.next <= #list and (best == nil or share[tenant] < share[best]) then best = tenant end
      end
      if best == nil then break end
      local list = by_tenant[best]
      local first = list[list.next]
      local job = jobs[first]
      repeat  -- this task, and the rest of its gang
        local i = list[list.next]
        popped[#popped + 1] = window[i]
        taken = taken + 1
        list.next = list.next + 1
        for r, amount in string.gmatch(info[job].needs, '([^,=]+)=(%d+)') do
          given[best][r] = (given[best][r] or 0) + tonumber(amount)
        end
      until info[job].gang == 0 or list.next > #list or jobs[list[list.next]] ~= job
      share[best] = dominant(best)
    end
    call_all('ZREM', KEYS[1], popped)
  end
end
if popped == nil then
  popped = {}
  local pairs_ = redis.call('ZPOPMIN', KEYS[1], count)
  for i = 1, #pairs_, 2 do popped[#popped + 1] = pairs_[i] end
end
if #popped == 0 then
  return {now}
end
-- A gang whose tasks the claim ends inside is taken whole.
local tail = tonumber(ARGV[4] or '') or 0
local last_job = job_of(popped[#popped])
if fair and last_job then
  job_info({last_job})
  if info[last_job].gang > 0 then tail = 100000 end
end
if tail > 0 and #popped == count then
  local job = last_job
  local next_ids = redis.call('ZRANGE', KEYS[1], 0, tail - 1)
  local same = 0
  while job and same < #next_ids and job_of(next_ids[same + 1]) == job do
    same = same + 1
  end
  if same > 0 then
    local more = redis.call('ZPOPMIN', KEYS[1], same)
    for i = 1, #more, 2 do popped[#popped + 1] = more[i] end
  end
end
local token = redis.call('INCR', KEYS[4])
local deadline = now_ms() + tonumber(ARGV[2])
local out, inflight, leases = {now, token, redis.call('ZCARD', KEYS[1])}, {}, {}
for i = 1, #popped do
  local id = popped[i]
  inflight[#inflight + 1] = deadline
  inflight[#inflight + 1] = id
  leases[#leases + 1] = id
  leases[#leases + 1] = token
  out[#out + 1] = id
end
call_all('ZADD', KEYS[2], inflight)
call_all('HSET', KEYS[3], leases)
return out
