-- gc_note.lua: count tasks that ended into their jobs (retention's bookkeeping), in one
-- step per call. Each task taken from tasks:ended goes to its job's ended set, scored by
-- when it ended, or inf for a batch or sysbatch job's slot outcome (slot_outcome in
-- _lib.lua: a task that completed, or failed with no retry queued: they stay with the
-- job; a batch job's failed ones are counted in its failed_slots);
-- then each job is settled (settle in _lib.lua): finished, or waiting for its ended
-- tasks to be old enough, or neither. A task another call counted already is skipped,
-- so calls may overlap and be resent.
--
-- KEYS[1] tasks:ended ZSET  KEYS[2] jobs:ended ZSET  KEYS[3] jobs:finished ZSET
-- KEYS[4] jobs:expiring ZSET  KEYS[5] stream STREAM  KEYS[6] config HASH (stream_maxlen)
-- then per job: job HASH, job:<id>:tasks ZSET, job:<id>:ended ZSET, then one task HASH per
-- task of it named in ARGV
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] ended tasks kept per running job  ARGV[3] job_retention (ms)
-- then per job: job id, n, then its n task ids
-- Returns {tasks counted, then the ids of the jobs that finished}.

local now = now_ms()
local events = events_to(ARGV[1], KEYS[5], KEYS[6])
local g = {jobs_ended = KEYS[2], finished = KEYS[3], expiring = KEYS[4], per_job = tonumber(ARGV[2]),
           retention = tonumber(ARGV[3]), now = now}
local counted, finished = 0, {}
local a, k = 4, 7
while a <= #ARGV do
  local id, n = ARGV[a], tonumber(ARGV[a + 1])
  local j = {id = id, job = KEYS[k], tasks = KEYS[k + 1], ended = KEYS[k + 2]}
  local text = redis.call('HGET', j.job, 'spec')
  local spec = text and cjson.decode(text)
  local last = 0
  for i = 1, n do
    local task_id, task = ARGV[a + 1 + i], KEYS[k + 2 + i]
    local at = redis.call('ZSCORE', KEYS[1], task_id)
    if at then
      redis.call('ZREM', KEYS[1], task_id)
      local cur = redis.call('HMGET', task, 'state', 'replaced_by')
      local state = cur[1]
      if spec and state and state ~= 'pending' and state ~= 'assigned' and state ~= 'running' then
        local score = at
        if slot_outcome(spec.type, state, cur[2]) then
          score = 'inf'  -- a slot's outcome: kept with its job
          if state == 'failed' and spec.type == 'batch' then
            redis.call('HINCRBY', j.job, 'failed_slots', 1)  -- the finish's status
          end
        end
        redis.call('ZADD', j.ended, score, task_id)
        if tonumber(at) > last then last = tonumber(at) end
        counted = counted + 1
      end
    end
  end
  if spec and settle(j, g, spec, last > 0 and last or now, events) == 'finished' then
    finished[#finished + 1] = id
  end
  a, k = a + 2 + n, k + 3 + n
end
return {counted, unpack(finished)}
