-- enqueue.lua: write a job's hash and queue new pending tasks of it, in one step, if the
-- job is still as the caller read it (compare and set: no WATCH round trips). Each task
-- gets the next enqueue sequence number; its active-queue score is
-- scheduler.queue.queue_score (priority first, then sequence).
--
-- A call creates at most one chunk of tasks (Store.enqueue: 500), so that no call
-- blocks Redis for long. The first call writes the job's hash, whose next_index already
-- counts every task, with the first chunk; the rest are "fill" calls (ARGV[1] =
-- "=<version>"), each atomic and idempotent: refused unless the job is still at that
-- version and running, they write nothing to the job's hash, and skip any task whose
-- hash already exists (a chunk sent twice creates nothing the second time).
--
-- KEYS[1] job:<id>         HASH
-- KEYS[2] jobs             SET
-- KEYS[3] jobs:global      SET
-- KEYS[4] q:active         ZSET
-- KEYS[5] q:backoff        ZSET
-- KEYS[6] job:<id>:tasks   ZSET  task id -> index
-- KEYS[7] q:seq            STRING
-- KEYS[8] jobs:shares      HASH
-- KEYS[9] q:wake           LIST  a token for a waiting worker when tasks go to q:active
-- KEYS[10] stream          STREAM  the namespace's events
-- KEYS[11] config          HASH  stream_maxlen
-- KEYS[12] job:<id>:history LIST  where a first call records the submit
-- KEYS[13] q:waiting       ZSET  where the tasks of a job held by its dependencies wait
-- KEYS[14] jobs:byid       ZSET  every job id, score 0: the index lists are paged by
-- KEYS[15 ..]              task HASH of each new task (<job>.<first index + i>)
-- ARGV[1] the job as read: "" = must not exist, "<version>|<next_index>|<status>", or
--         "=<version>": a fill call (see above); "=" alone matches no job and writes
--         nothing (Store.check_enqueue: whether Redis lets the caller run this script)
-- ARGV[2] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[3] job id
-- ARGV[4] spec version of the tasks
-- ARGV[5] priority
-- ARGV[6] index of the first task
-- ARGV[7] start in backoff for this many ms ("0": queue now)
-- ARGV[8] retries (tasks that ran before these in the same slots)
-- ARGV[9] "1" to add the job to jobs:global
-- ARGV[10] the job's jobs:shares value (Store.mark_job), written with the job's hash; "" for none
-- ARGV[11] the job event this call announces before its tasks' ("submitted", "updated": a
--          new version, "scaled"), or "" (none: a fill call, a restart or a replacement)
-- ARGV[12] the job's replicas, for its event ("" for a global job: none is sent)
-- ARGV[13] n, then n field/value pairs for the job hash ("updated" and, when the job is
--          new, "created" are set here to Redis TIME)
-- then "" (a fill call, or a submit not recorded), or who submitted it and how: the
--   record of history.lua's ARGV[2..] (record_at in _lib.lua), written to KEYS[12] and
--   announced (an audit event) after the call's other events, in the same step
-- then, optionally, one pinned node per task
-- last: now (ms), or "" for Redis TIME: a simulation's virtual clock (see clock_ms)
-- While the job's hash says held=1 (its `after` dependencies do not hold yet: the first
-- call of a submit that starts it writes the field, lua/unhold.lua removes it), its new
-- tasks wait in q:waiting, scored as in q:active, and wake no worker.
-- Returns {0} if the job changed since it was read (read it again), else {1, now, created}.

local MAX_PRIORITY = 1000

local job = KEYS[1]
local fill = string.sub(ARGV[1], 1, 1) == '='
if fill then
  local cur = redis.call('HMGET', job, 'version', 'status')
  if cur[1] ~= string.sub(ARGV[1], 2) or (cur[2] or 'running') ~= 'running' then return {0} end
elseif ARGV[1] == '' then
  if redis.call('EXISTS', job) == 1 then return {0} end
else
  local cur = redis.call('HMGET', job, 'version', 'next_index', 'status')
  if (cur[1] or '') .. '|' .. (cur[2] or '') .. '|' .. (cur[3] or '') ~= ARGV[1] then return {0} end
end

local events = events_to(ARGV[2], KEYS[10], KEYS[11])
local job_id, version = ARGV[3], ARGV[4]
local priority, first = tonumber(ARGV[5]), tonumber(ARGV[6])
local delay, retries = tonumber(ARGV[7]), ARGV[8]
local pairs_at = 14 + 2 * tonumber(ARGV[13])
local submitted, pins_at = nil, pairs_at + 1
if ARGV[pairs_at] ~= '' then submitted, pins_at = record_at(ARGV, pairs_at) end
local now = clock_ms(ARGV[#ARGV])
local new = {}  -- offsets of the tasks to create
for i = 0, #KEYS - 15 do
  if not fill or redis.call('EXISTS', KEYS[15 + i]) == 0 then new[#new + 1] = i end
end
local count = #new
if fill and count == 0 then return {1, now, 0} end
local first_seq = redis.call('INCRBY', KEYS[7], count) - count + 1

if not fill then
  local fields = {}
  for i = 14, pairs_at - 1 do fields[#fields + 1] = ARGV[i] end
  fields[#fields + 1] = 'updated'
  fields[#fields + 1] = int(now)
  call_all('HSET', job, fields)
  redis.call('HSETNX', job, 'created', int(now))
  redis.call('SADD', KEYS[2], job_id)
  redis.call('ZADD', KEYS[14], 0, job_id)
  if ARGV[9] == '1' then redis.call('SADD', KEYS[3], job_id) end
  if ARGV[10] ~= '' then redis.call('HSET', KEYS[8], job_id, ARGV[10]) end
  if ARGV[11] ~= '' then
    if ARGV[12] ~= '' then
      emit(events, {'type', 'job', 'id', job_id, 'event', ARGV[11], 'version', tonumber(version),
        'replicas', tonumber(ARGV[12])}, now)
    else
      emit(events, {'type', 'job', 'id', job_id, 'event', ARGV[11], 'version', tonumber(version)}, now)
    end
  end
end

local queued, indexes = {}, {}
local held = redis.call('HGET', job, 'held') == '1'
if held then delay = 0 end
local queue = held and KEYS[13] or (delay > 0 and KEYS[5] or KEYS[4])
for n = 1, count do
  local i = new[n]
  local index = int(first + i)
  local id = job_id .. '.' .. index
  local score = int((MAX_PRIORITY - priority) * 1e12 + first_seq + n - 1)
  local task = {'id', id, 'job', job_id, 'version', version, 'state', 'pending', 'priority', ARGV[5],
                'qscore', score, 'created', int(now), 'attempts', '0', 'index', index, 'retries', retries}
  local pin = pins_at + i < #ARGV and ARGV[pins_at + i] or nil
  if pin then
    task[#task + 1] = 'pin'
    task[#task + 1] = pin
  end
  if delay > 0 then
    task[#task + 1] = 'backoff_until'
    task[#task + 1] = int(now + delay)
    queued[#queued + 1] = int(now + delay)
  else
    queued[#queued + 1] = score
  end
  queued[#queued + 1] = id
  indexes[#indexes + 1] = index
  indexes[#indexes + 1] = id
  redis.call('HSET', KEYS[15 + i], unpack(task))
  emit(events, {'type', 'task', 'id', id, 'job', job_id, 'state', 'pending'}, now)
end
call_all('ZADD', queue, queued)
call_all('ZADD', KEYS[6], indexes)
if count > 0 and delay == 0 and not held then wake(KEYS[9]) end
if submitted then record(events, KEYS[12], submitted, now) end
return {1, now, count}
