-- job_page.lua: a page of jobs as one reply (GET /v1/jobs?per_page=N: state/job_pages.py).
-- Reads only; a page is at most 1000 jobs (the route's bound), so a call reads that many
-- hashes and task lists at most.
--
-- KEYS, in pairs, one pair per job of the page: job:<id> HASH, job:<id>:tasks ZSET
-- Returns a flat list: per job, its version, status, created, spec, failure and suspended (nil when
-- the field is not set; a job that does not exist has a nil spec), n, then its n task ids.

local out, n = {}, 0  -- n: the length of out, kept (# is a search each time)
for i = 1, #KEYS, 2 do
  local fields = redis.call('HMGET', KEYS[i], 'version', 'status', 'created', 'spec', 'failure', 'suspended')
  for j = 1, 6 do out[n + j] = fields[j] end
  local ids = redis.call('ZRANGE', KEYS[i + 1], 0, -1)
  out[n + 7] = #ids
  for j = 1, #ids do out[n + 7 + j] = ids[j] end
  n = n + 7 + #ids
end
return out
