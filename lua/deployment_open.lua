-- deployment_open.lua: a new version of a running job, rolled out by a deployment. In one
-- step, if the job is still as the caller read it (compare and set, as enqueue.lua): write
-- the job's hash (its new version and spec; no task is created here: workers advancing the
-- deployment create them), open the deployment, and cancel the job's previous deployment
-- if it was still in progress (the new one supersedes it).
--
-- KEYS[1] job:<id>               HASH
-- KEYS[2] jobs:shares            HASH
-- KEYS[3] deployments            ZSET  id -> opened (ms)
-- KEYS[4] deployments:active     ZSET  id -> opened (ms)
-- KEYS[5] job:<id>:deployments   ZSET  id -> version it rolls out
-- KEYS[6] deployment:<new id>    HASH
-- KEYS[7] deployment:<previous>  HASH  the job's deployment as read (any key when none)
-- KEYS[8] stream                 STREAM  the namespace's events
-- KEYS[9] config                 HASH  stream_maxlen
-- ARGV[1] the job as read: "<version>|<next_index>|<status>"
-- ARGV[2] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[3] job id
-- ARGV[4] the job's deployment as read ("" when none)
-- ARGV[5] the job's jobs:shares value
-- ARGV[6] new deployment id
-- ARGV[7] n, then n field/value pairs for the job hash
-- then m, then m field/value pairs for the deployment hash
-- Returns {0} if the job changed since it was read, else {1, now}.

local job = KEYS[1]
local cur = redis.call('HMGET', job, 'version', 'next_index', 'status', 'deployment', 'stable')
if (cur[1] or '') .. '|' .. (cur[2] or '') .. '|' .. (cur[3] or '') ~= ARGV[1] then return {0} end
if (cur[4] or '') ~= ARGV[4] then return {0} end

local events, job_id, id = events_to(ARGV[2], KEYS[8], KEYS[9]), ARGV[3], ARGV[6]
local now = now_ms()
local n = tonumber(ARGV[7])
local fields = {}
for i = 8, 7 + 2 * n do fields[#fields + 1] = ARGV[i] end
local m_at = 8 + 2 * n
local dep = {}
for i = m_at + 1, m_at + 2 * tonumber(ARGV[m_at]) do dep[#dep + 1] = ARGV[i] end

-- The version to go back to on failure: the last one a deployment made healthy, else the
-- version that ran before any deployment.
local stable = cur[5]
if not stable or stable == '' then stable = cur[1] end

if ARGV[4] ~= '' then
  local prev = redis.call('HGET', KEYS[7], 'state')
  if prev == 'running' or prev == 'paused' or prev == 'awaiting_promotion' then
    redis.call('HSET', KEYS[7], 'state', 'cancelled', 'updated', int(now),
               'message', 'superseded by the deployment of a newer version (' .. id .. ')')
    redis.call('ZREM', KEYS[4], ARGV[4])
    emit(events, {'type', 'deployment', 'id', ARGV[4], 'job', job_id, 'state', 'cancelled'}, now)
  end
end

fields[#fields + 1] = 'updated'
fields[#fields + 1] = int(now)
fields[#fields + 1] = 'deployment'
fields[#fields + 1] = id
fields[#fields + 1] = 'stable'
fields[#fields + 1] = stable
call_all('HSET', job, fields)
if ARGV[5] ~= '' then redis.call('HSET', KEYS[2], job_id, ARGV[5]) end

dep[#dep + 1] = 'stable'
dep[#dep + 1] = stable
for _, pair in ipairs({{'id', id}, {'job', job_id}, {'state', 'running'}, {'created', int(now)},
                       {'updated', int(now)}, {'progress_at', int(now)}, {'resumed_at', int(now)}}) do
  dep[#dep + 1] = pair[1]
  dep[#dep + 1] = pair[2]
end
redis.call('DEL', KEYS[6])
call_all('HSET', KEYS[6], dep)
redis.call('ZADD', KEYS[3], now, id)
redis.call('ZADD', KEYS[4], now, id)
redis.call('ZADD', KEYS[5], redis.call('HGET', KEYS[6], 'to'), id)
emit(events, {'type', 'deployment', 'id', id, 'job', job_id, 'state', 'running'}, now)
return {1, now}
