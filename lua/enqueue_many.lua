-- enqueue_many.lua: create many new jobs and their pending tasks in one step (bulk
-- submission: Store.enqueue_many, a chunk of up to ENQUEUE_CHUNK tasks per call). Each job
-- is created only if its hash does not exist yet (and announced: a "submitted" job
-- event before its tasks'); a job that exists is left alone and reported (the caller submits it the ordinary way, which compares and updates). So a
-- chunk sent twice creates nothing the second time. What a created job and its tasks look
-- like is exactly what enqueue.lua's first call writes for a new job at version 1 (task
-- hashes, queue scores from one enqueue sequence, one "pending" event per task), plus its
-- jobs:shares entry (Store.mark_job).
--
-- Each job it creates is recorded as submitted (docs/security.md, Who did what), in the
-- same step: an entry at the end of its history and an audit event after its tasks',
-- as history.lua would write them for {action "submit", details {version 1, change
-- "create", tasks n}}.
--
-- Jobs come in groups whose specs differ only in their id (bulk files are mostly made
-- from one template): a group's spec text, shares value and size are sent once, and each
-- job's spec is '{"id":"<id>' followed by the group's rest of the text.
--
-- KEYS[1] jobs             SET
-- KEYS[2] q:active         ZSET
-- KEYS[3] q:seq            STRING
-- KEYS[4] jobs:shares      HASH
-- KEYS[5] q:wake           LIST  a token for a waiting worker
-- KEYS[6] stream           STREAM  the namespace's events
-- KEYS[7] config           HASH  stream_maxlen
-- KEYS[8] jobs:byid        ZSET  every job id, score 0: the index lists are paged by
-- then for each job, in order: job:<id> HASH, job:<id>:tasks ZSET, job:<id>:history
--   LIST, then its n task HASHes (<job>.<i>, i from 0)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] who submitted them, as a JSON string ('"team-a-ci"'); "" records nothing
-- ARGV[3] how many entries a job's history keeps
-- ARGV[4] G, the number of groups
-- then per group: priority, the spec text after the id ('",...}'), shares value
--   ("tenant|gang|needs"), n (tasks per job), J (jobs), then the J job ids
-- ARGV[#ARGV] now (ms), or "" for Redis TIME: a simulation's virtual clock (see clock_ms)
-- Returns {now, created}: created has one entry per job, 1 when this call created it,
-- 0 when it existed already (nothing written for it).

local MAX_PRIORITY = 1000

local events = events_to(ARGV[1], KEYS[6], KEYS[7])
local now = clock_ms(ARGV[#ARGV])
local nowtxt = int(now)
local tail = events.common .. ',"ts":' .. nowtxt .. '}'  -- how every event of the call ends
local seq = tonumber(redis.call('GET', KEYS[3]) or '0')
local first_seq = seq
local created, members, queued, shares = {}, {}, {}, {}
local by, keep = ARGV[2], tonumber(ARGV[3])

-- Mostly every job a call is given is new: one EXISTS of all their hashes says so, and
-- then no job is looked up alone.
local jobkeys = {}
do
  local key, arg = 9, 5
  for _ = 1, tonumber(ARGV[4]) do
    local n, count = tonumber(ARGV[arg + 3]), tonumber(ARGV[arg + 4])
    arg = arg + 5 + count
    for _ = 1, count do
      jobkeys[#jobkeys + 1] = KEYS[key]
      key = key + 3 + n
    end
  end
end
local existing = 0
for i = 1, #jobkeys, 4000 do
  existing = existing + redis.call('EXISTS', unpack(jobkeys, i, math.min(i + 3999, #jobkeys)))
end
local made = {}

local key, arg = 9, 5
for _ = 1, tonumber(ARGV[4]) do
  local priority, rest, share, ntxt = ARGV[arg], ARGV[arg + 1], ARGV[arg + 2], ARGV[arg + 3]
  local n, count = tonumber(ntxt), tonumber(ARGV[arg + 4])
  local base = (MAX_PRIORITY - tonumber(priority)) * 1e12
  arg = arg + 5
  -- The group's jobs share their record but for the id (built here as history.lua's
  -- would be, without JSON parsing): one entry text, the audit event's tail, and their
  -- job event's tail.
  local entry, audit = '', ''
  if by ~= '' then
    entry = '{"ts":' .. nowtxt .. ',"action":"submit","by":' .. by .. ',"details":{"version":1,"change":"create",' ..
      '"tasks":' .. ntxt .. '}}'
    audit = '","by":' .. by .. ',"version":1,"change":"create","tasks":' .. ntxt .. tail
  end
  local submitted = '","event":"submitted","version":1,"replicas":' .. ntxt .. tail
  for _ = 1, count do
    local id = ARGV[arg]
    local job = KEYS[key]
    arg = arg + 1
    -- A job id given twice in one call: the second finds the first's hash (or its mark in
    -- `made`) and is reported.
    local new
    if existing == 0 then new = not made[job] else new = redis.call('EXISTS', job) == 0 end
    if new then
      made[job] = true
      local spec = '{"id":"' .. id .. rest
      redis.call('HSET', job, 'id', id, 'spec', spec, 'spec:1', spec, 'version', '1', 'status', 'running',
        'next_index', ntxt, 'updated', nowtxt, 'created', nowtxt)
      announce(events, '{"type":"job","id":"' .. id .. submitted)
      created[#created + 1] = 1
      members[#members + 1] = id
      shares[#shares + 1] = id
      shares[#shares + 1] = share
      local indexes = {}
      for i = 0, n - 1 do
        seq = seq + 1
        local index = int(i)
        local task = id .. '.' .. index
        local score = int(base + seq)
        redis.call('HSET', KEYS[key + 3 + i], 'id', task, 'job', id, 'version', '1', 'state', 'pending',
          'priority', priority, 'qscore', score, 'created', nowtxt, 'attempts', '0', 'index', index,
          'retries', '0')
        announce(events, '{"type":"task","id":"' .. task .. '","job":"' .. id .. '","state":"pending"' .. tail)
        queued[#queued + 1] = score
        queued[#queued + 1] = task
        indexes[#indexes + 1] = index
        indexes[#indexes + 1] = task
      end
      if n > 0 then redis.call('ZADD', KEYS[key + 1], unpack(indexes)) end
      if by ~= '' then
        remember(KEYS[key + 2], keep, entry)
        announce(events, '{"type":"audit","action":"submit","job":"' .. id .. audit)
      end
    else
      created[#created + 1] = 0
    end
    key = key + 3 + n
  end
end

if #members > 0 then
  redis.call('INCRBY', KEYS[3], seq - first_seq)
  call_all('SADD', KEYS[1], members)
  local indexed = {}
  for i, id in ipairs(members) do indexed[2 * i - 1], indexed[2 * i] = 0, id end
  call_all('ZADD', KEYS[8], indexed)
  call_all('HSET', KEYS[4], shares)
  call_all('ZADD', KEYS[2], queued)
  if #queued > 0 then wake(KEYS[5]) end
end
return {now, created}
