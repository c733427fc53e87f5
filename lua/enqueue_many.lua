-- enqueue_many.lua: create many new jobs and their pending tasks in one step (bulk
-- submission: Store.enqueue_many, a chunk of up to ENQUEUE_CHUNK tasks per call). Each job
-- is created only if its hash does not exist yet; a job that exists is left alone and
-- reported (the caller submits it the ordinary way, which compares and updates). So a
-- chunk sent twice creates nothing the second time. What a created job and its tasks look
-- like is exactly what enqueue.lua's first call writes for a new job at version 1 (task
-- hashes, queue scores from one enqueue sequence, one "pending" event per task), plus its
-- jobs:shares entry (Store.mark_job).
--
-- KEYS[1] jobs             SET
-- KEYS[2] q:active         ZSET
-- KEYS[3] q:seq            STRING
-- KEYS[4] jobs:shares      HASH
-- then for each job j of the J: job:<id> HASH, job:<id>:tasks ZSET
-- then for each job, for each of its n tasks: task HASH (<job>.<i>, i from 0)
-- ARGV[1] events channel
-- ARGV[2] J
-- then per job: job id, priority, spec text (normalised JSON), shares value
--   ("tenant|gang|needs"), n
-- Returns {now, created}: created has one entry per job, 1 when this call created it,
-- 0 when it existed already (nothing written for it).

local MAX_PRIORITY = 1000

local channel = ARGV[1]
local J = tonumber(ARGV[2])
local now = now_ms()
local nowtxt = int(now)
local jobs, total = {}, 0
local task_key = 5 + 2 * J
for j = 1, J do
  local a = 3 + 5 * (j - 1)
  local job = {id = ARGV[a], priority = ARGV[a + 1], spec = ARGV[a + 2], shares = ARGV[a + 3],
               n = tonumber(ARGV[a + 4]), key = KEYS[3 + 2 * j], tasks_key = KEYS[4 + 2 * j], first_key = task_key}
  task_key = task_key + job.n
  -- A job id given twice in one call: the second finds the first's hash and is reported.
  job.new = redis.call('EXISTS', job.key) == 0
  if job.new then
    -- Mark it now, so that a second occurrence in this call sees it as existing.
    redis.call('HSET', job.key, 'id', job.id, 'spec', job.spec, 'spec:1', job.spec, 'version', '1',
      'status', 'running', 'next_index', int(job.n), 'updated', nowtxt, 'created', nowtxt)
    total = total + job.n
  end
  jobs[j] = job
end

local seq = redis.call('INCRBY', KEYS[3], total) - total
local created, members, queued, shares = {}, {}, {}, {}
for j, job in ipairs(jobs) do
  if job.new then
    created[j] = 1
    members[#members + 1] = job.id
    shares[#shares + 1] = job.id
    shares[#shares + 1] = job.shares
    local indexes = {}
    local priority = tonumber(job.priority)
    for i = 0, job.n - 1 do
      seq = seq + 1
      local index = int(i)
      local id = job.id .. '.' .. index
      local score = int((MAX_PRIORITY - priority) * 1e12 + seq)
      redis.call('HSET', KEYS[job.first_key + i], 'id', id, 'job', job.id, 'version', '1', 'state', 'pending',
        'priority', job.priority, 'qscore', score, 'created', nowtxt, 'attempts', '0', 'index', index,
        'retries', '0')
      redis.call('PUBLISH', channel, '{"type":"task","id":"' .. id .. '","job":"' .. job.id ..
        '","state":"pending","ts":' .. nowtxt .. '}')
      queued[#queued + 1] = score
      queued[#queued + 1] = id
      indexes[#indexes + 1] = index
      indexes[#indexes + 1] = id
    end
    if #indexes > 0 then call_all('ZADD', job.tasks_key, indexes) end
  else
    created[j] = 0
  end
end
if #members > 0 then
  call_all('SADD', KEYS[1], members)
  call_all('HSET', KEYS[4], shares)
end
if #queued > 0 then call_all('ZADD', KEYS[2], queued) end
return {now, created}
