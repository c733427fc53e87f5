-- replace.lua: end live tasks of one job and queue a replacement for each, in one step.
-- Ending a task and queueing its replacement in two calls lets a scale that counts the
-- job's open tasks in between see one too few (and stop one too few). Here the job's
-- count of open tasks (pending or live) never changes: an ended task's replacement exists
-- from the same moment.
--
-- Compare and set on the job, as enqueue.lua: unless the job is still as the caller read
-- it ("<version>|<next_index>|<status>"), nothing is done (read again, call again). The
-- replacements take indexes from next_index on, in the order of the tasks asking for one,
-- each recording the task it replaces (`replaces`; the task replaced records its
-- `replaced_by`, which retention reads) and keeping its slot (`slot`: the index of the
-- slot's first task, what SCHED_TASK_INDEX shows). A task that this call does not end
-- from a live state (it ended already, or is elsewhere) gets none.
--
-- KEYS[1..10] as finish.lua: q:active q:backoff q:unschedulable q:inflight q:leases
--             nodes:changes nodes:seq q:cycle q:move_cycle tally:priority
-- KEYS[11] usage HASH  KEYS[12] job:<id> HASH  KEYS[13] job:<id>:tasks ZSET
-- KEYS[14] q:seq  KEYS[15] q:wake  KEYS[16] stream STREAM  KEYS[17] config HASH (stream_maxlen)
-- KEYS[18] q:waiting ZSET (a pending task ended here leaves it too)
-- then 6 keys per task p (0-based), from 19: task HASH, node HASH (as finish.lua's), node
-- tasks SET, tally:job ZSET,
-- faults:<job> ZSET (written when a live task ends as failed), tally:dom:<job> HASH
-- then one task HASH per replacement asked for: <job>.<next_index + i>
-- KEYS[#KEYS] tasks:ended ZSET (each task that ends is added, for retention)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] the job as read  ARGV[3] job id
-- ARGV[4] the replacements' spec version  ARGV[5] their priority  ARGV[6] their backoff (ms, "0": none)
-- ARGV[7] how long a failure counts in faults:<job> (ms)
-- then per task: id, new state, message, its node, the replacement's retries ("" for no
-- replacement), the replacement's pinned node ("" for none), the slot's recent failures
-- the replacement carries ("" for none: the times, in ms, that reschedule.interval counts)
-- ARGV[#ARGV] now (ms), or "" for Redis TIME: a simulation's virtual clock (see clock_ms)
-- Returns {0} when the job changed since it was read; else {1, then per task what
-- finish.lua reports, then per task the id of its replacement ("" for none)}.

local MAX_PRIORITY = 1000
local job = KEYS[12]
local cur = redis.call('HMGET', job, 'version', 'next_index', 'status', 'updated')
if (cur[1] or '') .. '|' .. (cur[2] or '') .. '|' .. (cur[3] or '') ~= ARGV[2] then return {0} end

local now = clock_ms(ARGV[#ARGV])
local events, job_id, version = events_to(ARGV[1], KEYS[16], KEYS[17]), ARGV[3], ARGV[4]
local priority, delay, fault_window = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local next_index = tonumber(cur[2] or '0')
local n = (#ARGV - 8) / 7
local first_new = 19 + 6 * n
local results, made = {}, {}
local any_freed, created = false, 0
for p = 0, n - 1 do
  local a, base = 8 + 7 * p, 19 + 6 * p
  local id, retries, pin, failures = ARGV[a], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6]
  local result, freed = end_task(id, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
    {task = KEYS[base], node = KEYS[base + 1], node_tasks = KEYS[base + 2], tally_job = KEYS[base + 3],
     faults = KEYS[base + 4], tally_dom = KEYS[base + 5], fault_window = fault_window,
     queues = {KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[18]}, leases = KEYS[5], tally_priority = KEYS[10],
     changes = KEYS[6], seq = KEYS[7], usage = KEYS[11], ended = KEYS[#KEYS]}, events, now)
  results[#results + 1] = result
  any_freed = any_freed or freed
  if retries ~= '' and (result == 'assigned' or result == 'running') then
    -- The fields enqueue.lua gives a new pending task, plus the task it replaces.
    local index = int(next_index + created)
    local new_id = job_id .. '.' .. index
    local slot = redis.call('HGET', KEYS[base], 'slot') or redis.call('HGET', KEYS[base], 'index') or index
    local seq = redis.call('INCR', KEYS[14])
    local score = int((MAX_PRIORITY - priority) * 1e12 + seq)
    local task = {'id', new_id, 'job', job_id, 'version', version, 'state', 'pending', 'priority', ARGV[5],
                  'qscore', score, 'created', int(now), 'attempts', '0', 'index', index, 'retries', retries,
                  'replaces', id, 'slot', slot}
    if failures ~= '' then
      task[#task + 1] = 'failures'
      task[#task + 1] = failures
    end
    if pin ~= '' then
      task[#task + 1] = 'pin'
      task[#task + 1] = pin
    end
    if delay > 0 then
      task[#task + 1] = 'backoff_until'
      task[#task + 1] = int(now + delay)
      redis.call('ZADD', KEYS[2], int(now + delay), new_id)
    else
      redis.call('ZADD', KEYS[1], score, new_id)
    end
    redis.call('HSET', KEYS[first_new + created], unpack(task))
    redis.call('ZADD', KEYS[13], index, new_id)
    emit(events, {'type', 'task', 'id', new_id, 'job', job_id, 'state', 'pending'}, now)
    created = created + 1
    made[#made + 1] = new_id
    redis.call('HSET', KEYS[base], 'replaced_by', new_id)
  else
    made[#made + 1] = ''
  end
end
if created > 0 then
  -- HINCRBY, not HSET: the one write to a job's hash that an agent's Redis user may make
  -- (it cannot write a spec; docs/security.md).
  redis.call('HINCRBY', job, 'next_index', created)
  redis.call('HINCRBY', job, 'updated', int(now - tonumber(cur[4] or '0')))
  if delay == 0 then wake(KEYS[15]) end
end
if any_freed then
  redis.call('SET', KEYS[9], redis.call('GET', KEYS[8]) or '0')
end
local out = {1}
for i = 1, #results do out[#out + 1] = results[i] end
for i = 1, #made do out[#out + 1] = made[i] end
return out
