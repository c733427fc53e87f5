-- gc_job.lua: remove a finished job with every key of it, its tasks' and deployments'
-- included, and announce it ("job removed"), in one step; or, for a job of more tasks
-- than one call takes, remove a part of its tasks (the last call removes the job).
-- Nothing is removed unless, now: the job is as the caller read it (version, next_index,
-- status), it is finished (settle in _lib.lua: none of its tasks open, and it is stopped
-- or a batch job), each task named is counted as ended, no deployment of it is in
-- progress, nothing holds it (job:<id>:holds), it is not listed as waiting for its
-- dependencies (jobs:held: the upkeep has yet to let go of what it waited for, which its
-- hold keeps), and no submit is still queueing its tasks.
-- The final call also needs the tasks named to be all the job has left.
--
-- KEYS[1] deployments ZSET  KEYS[2] deployments:active ZSET  KEYS[3] jobs:filling ZSET
-- KEYS[4] stream STREAM  KEYS[5] config HASH (stream_maxlen)
-- then the job's own keys (Keys.job_keys), starting: job HASH, job:<id>:tasks ZSET,
-- job:<id>:ended ZSET, job:<id>:deployments ZSET, job:<id>:holds SET
-- then the keys that index jobs (Keys.job_indexes: SETs, ZSETs and HASHes of job ids),
-- starting: jobs, jobs:global, jobs:shares, jobs:filling, jobs:ended, jobs:finished, jobs:expiring,
-- jobs:labels, jobs:anti, jobs:held
-- then one deployment HASH per deployment of the job, then 3 keys per task: task HASH,
-- task output HASH, task attempts LIST, then, for a launch of a periodic or parameterized
-- job, its parent's job:<parent>:children ZSET and job:<parent>:tokens HASH (the final call
-- takes the launch out of both: a token answers only while the child it made is kept)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] job id  ARGV[3] the job as read ("<version>|<next_index>|<status>")
-- ARGV[4] how many own keys  ARGV[5] how many index keys  ARGV[6] "1" for the final call
-- ARGV[7] ended tasks kept per running job  ARGV[8] job_retention (ms)
-- ARGV[9] tasks removed by earlier calls for this job  ARGV[10] D, then D deployment ids,
-- then the task ids
-- Returns {"removed", n}, {"part", n}, or {why not, 0}: "changed" (the job is not as read,
-- or has other tasks than named: read again), "open" (it is not finished), "settled" (it
-- was not known finished until now: its retention starts now), "gone", "deploying",
-- "held", "waiting", "filling".

local now = now_ms()
local events = events_to(ARGV[1], KEYS[4], KEYS[5])
local job_id, owned, indexed, final = ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1'
local job, tasks, ended, deployments, holds = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local cur = redis.call('HMGET', job, 'version', 'next_index', 'status', 'finished_at', 'finished_status')
if not cur[1] then return {'gone', 0} end
local j = {id = job_id, job = job, tasks = tasks, ended = ended}
local g = {jobs_ended = KEYS[5 + owned + 5], finished = KEYS[5 + owned + 6], expiring = KEYS[5 + owned + 7],
           per_job = tonumber(ARGV[7]), retention = tonumber(ARGV[8]), now = now}
if (cur[1] or '') .. '|' .. (cur[2] or '') .. '|' .. (cur[3] or '') ~= ARGV[3] then return {'changed', 0} end
local state = settle(j, g, nil, now, events)
if state == 'finished' then return {'settled', 0} end  -- it finished only now: its retention starts now
if state ~= 'kept' then return {state, 0} end
if redis.call('SCARD', holds) > 0 then return {'held', 0} end
if redis.call('ZSCORE', KEYS[5 + owned + 10], job_id) then return {'waiting', 0} end
if redis.call('ZSCORE', KEYS[3], job_id) then return {'filling', 0} end
local d = tonumber(ARGV[10])
if redis.call('ZCARD', deployments) ~= d then return {'changed', 0} end
for i = 1, d do
  local id = ARGV[10 + i]
  if not redis.call('ZSCORE', deployments, id) then return {'changed', 0} end
  if redis.call('ZSCORE', KEYS[2], id) then return {'deploying', 0} end
end
local first_task_arg, first_task_key = 11 + d, 6 + owned + indexed + d
local n = #ARGV - first_task_arg + 1
for i = 0, n - 1 do
  if not redis.call('ZSCORE', ended, ARGV[first_task_arg + i]) then return {'changed', 0} end
end
if final and redis.call('ZCARD', tasks) ~= n then return {'changed', 0} end

for i = 0, n - 1 do
  local b = first_task_key + 3 * i
  redis.call('DEL', KEYS[b], KEYS[b + 1], KEYS[b + 2])
end
if not final then
  local ids = {}
  for i = 0, n - 1 do ids[#ids + 1] = ARGV[first_task_arg + i] end
  call_all('ZREM', tasks, ids)
  call_all('ZREM', ended, ids)
  return {'part', n}
end
for i = 6, 5 + owned do redis.call('DEL', KEYS[i]) end
for i = 1, d do
  redis.call('DEL', KEYS[5 + owned + indexed + i])
  redis.call('ZREM', KEYS[1], ARGV[10 + i])
end
for i = 6 + owned, 5 + owned + indexed do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind == 'set' then redis.call('SREM', KEYS[i], job_id)
  elseif kind == 'zset' then redis.call('ZREM', KEYS[i], job_id)
  elseif kind == 'hash' then redis.call('HDEL', KEYS[i], job_id) end
end
local parent = first_task_key + 3 * n
if #KEYS > parent then  -- a launch: its parent's launches and tokens (at most DISPATCHES_KEPT) forget it
  redis.call('ZREM', KEYS[parent], job_id)
  local tokens = redis.call('HGETALL', KEYS[parent + 1])
  for i = 1, #tokens, 2 do
    if tokens[i + 1] == job_id then redis.call('HDEL', KEYS[parent + 1], tokens[i]) end
  end
end
emit(events, {'type', 'job', 'id', job_id, 'event', 'removed', 'version', tonumber(cur[1]),
  'status', cur[5] or (cur[3] == 'stopped' and 'stopped' or 'complete'), 'finished_at', tonumber(cur[4] or now),
  'tasks', n + tonumber(ARGV[9])}, now)
return {'removed', n}
