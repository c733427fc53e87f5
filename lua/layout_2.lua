-- layout_2.lua: bring one job of a namespace written before layout 2 up to it (sched
-- upgrade), in one step per call: its ended tasks counted in job:<id>:ended (as
-- gc_note.lua counts them), each task that a replacement names (`replaces`) given its
-- `replaced_by`, and, with the last call for the job, the job settled (settle in
-- _lib.lua: finished, or waiting for retention to look at its ended tasks). Idempotent:
-- a call made twice changes nothing more.
--
-- KEYS[1] jobs:ended ZSET  KEYS[2] jobs:finished ZSET  KEYS[3] jobs:expiring ZSET
-- KEYS[4] stream STREAM  KEYS[5] config HASH (stream_maxlen)
-- KEYS[6] job HASH  KEYS[7] job:<id>:tasks ZSET  KEYS[8] job:<id>:ended ZSET
-- then 2 keys per task: task HASH, the HASH of the task it replaces (its own when none)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] job id  ARGV[3] ended tasks kept per running job  ARGV[4] job_retention (ms)
-- ARGV[5] "1" for the job's last call  ARGV[6] when the job finished, if it did: the latest
-- end among its tasks, or when it was stopped (ms)
-- then per task: its id, the id of the task it replaces ("" for none), "1" if a task of the
-- job replaces it (else "")
-- Returns how many tasks it counted as ended.

local now = now_ms()
local events = events_to(ARGV[1], KEYS[4], KEYS[5])
local job = KEYS[6]
local text = redis.call('HGET', job, 'spec')
if not text then return 0 end
local spec = cjson.decode(text)
local counted = 0
for a = 7, #ARGV, 3 do
  local b = 9 + 2 * (a - 7) / 3
  local id, replaces, retried = ARGV[a], ARGV[a + 1], ARGV[a + 2] == '1'
  local cur = redis.call('HMGET', KEYS[b], 'state', 'ended_at', 'created')
  if cur[1] and cur[1] ~= 'pending' and cur[1] ~= 'assigned' and cur[1] ~= 'running' then
    local score = cur[2] or cur[3] or int(now)
    if slot_outcome(spec.type, cur[1], retried) then  -- kept with the job, as gc_note.lua keeps it
      score = 'inf'
    end
    redis.call('ZADD', KEYS[8], score, id)
    counted = counted + 1
  end
  if replaces ~= '' and redis.call('EXISTS', KEYS[b + 1]) == 1 then
    redis.call('HSET', KEYS[b + 1], 'replaced_by', id)
  end
end
if ARGV[5] == '1' then
  local at = tonumber(ARGV[6])
  if at <= 0 then at = now end
  settle({id = ARGV[2], job = job, tasks = KEYS[7], ended = KEYS[8]},
         {jobs_ended = KEYS[1], finished = KEYS[2], expiring = KEYS[3], per_job = tonumber(ARGV[3]),
          retention = tonumber(ARGV[4]), now = now}, spec, at, events)
end
return counted
