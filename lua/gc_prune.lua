-- gc_prune.lua: remove ended tasks of one job (their hashes, output and attempts), in one
-- step, then settle the job (settle in _lib.lua). The caller chose them by the retention
-- rules; this keeps any that something still needs, whatever the caller read:
-- - a task not counted as ended in job:<id>:ended (it is open, or not counted yet), or
--   a batch job's slot outcome (scored inf: kept with its job);
-- - a task whose replacement (replaced_by) is still open: the chain from a running task
--   back to the one it replaced stays one link long;
-- - while a deployment of the job is in progress, a task of the version it rolls out
--   (its failures count towards the deployment's max_failure_ratio).
--
-- KEYS[1] job HASH  KEYS[2] job:<id>:tasks ZSET  KEYS[3] job:<id>:ended ZSET
-- KEYS[4] jobs:ended ZSET  KEYS[5] jobs:finished ZSET  KEYS[6] jobs:expiring ZSET
-- KEYS[7] deployments:active ZSET  KEYS[8] the job's deployment HASH as the caller read it
--   (the job HASH when it had none)  KEYS[9] stream STREAM  KEYS[10] config HASH (stream_maxlen)
-- then 4 keys per task: task HASH, task output HASH, task attempts LIST, and the HASH of
-- the task that replaced it as the caller read it (the task's own HASH when none)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] job id  ARGV[3] ended tasks kept per running job  ARGV[4] job_retention (ms)
-- ARGV[5] the job's deployment as the caller read it ("" for none)
-- then the task ids
-- Returns the ids of the tasks removed, or {-1} when the job's deployment is not the one
-- read (nothing removed: read again).

local now = now_ms()
local events = events_to(ARGV[1], KEYS[9], KEYS[10])
local job_id = ARGV[2]
local deployment = redis.call('HGET', KEYS[1], 'deployment') or ''
if deployment ~= ARGV[5] then return {-1} end
local rolling = nil
if deployment ~= '' and redis.call('ZSCORE', KEYS[7], deployment) then
  rolling = redis.call('HGET', KEYS[8], 'to')
end
local removed = {}
for a = 6, #ARGV do
  local id, b = ARGV[a], 11 + 4 * (a - 6)
  local task = KEYS[b]
  local at = redis.call('ZSCORE', KEYS[3], id)
  if at and at ~= 'inf' then
    local cur = redis.call('HMGET', task, 'state', 'replaced_by', 'version')
    local keep = cur[1] == 'pending' or cur[1] == 'assigned' or cur[1] == 'running'
    if not keep and cur[2] and cur[2] ~= '' then
      -- the successor's key is the task's own key with the successor's id in place of its own
      if KEYS[b + 3] ~= string.sub(task, 1, #task - #id) .. cur[2] then
        keep = true  -- read before the replacement was recorded: look again next time
      else
        local next_state = redis.call('HGET', KEYS[b + 3], 'state')
        keep = next_state == 'pending' or next_state == 'assigned' or next_state == 'running'
      end
    end
    if not keep and rolling and cur[3] == rolling then keep = true end
    if not keep then
      redis.call('DEL', task, KEYS[b + 1], KEYS[b + 2])
      redis.call('ZREM', KEYS[2], id)
      redis.call('ZREM', KEYS[3], id)
      removed[#removed + 1] = id
    end
  end
end
settle({id = job_id, job = KEYS[1], tasks = KEYS[2], ended = KEYS[3]},
       {jobs_ended = KEYS[4], finished = KEYS[5], expiring = KEYS[6], per_job = tonumber(ARGV[3]),
        retention = tonumber(ARGV[4]), now = now}, nil, now, events)
if #removed > 0 then
  emit(events, {'type', 'job', 'id', job_id, 'event', 'tasks removed', 'tasks', removed}, now)
end
return removed
