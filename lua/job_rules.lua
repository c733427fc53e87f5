-- job_rules.lua: record what other jobs' placement rules need of a job: its labels (what
-- selectors match) and its required job_anti_affinity entries (which keep the jobs they
-- match away from its tasks as well). Any change bumps rules:gen, so that a placement
-- whose selectors were resolved before is refused at commit and resolved again.
--
-- KEYS[1] jobs:labels HASH  job -> labels (JSON)
-- KEYS[2] jobs:anti HASH  job -> required job_anti_affinity entries (JSON)
-- KEYS[3] rules:gen STRING
-- ARGV[1] job id  ARGV[2] its labels ("" for none)  ARGV[3] its entries ("" for none)
-- Returns rules:gen after the call.

local job = ARGV[1]
local changed = false
for i = 1, 2 do
  local before = redis.call('HGET', KEYS[i], job) or ''
  if before ~= ARGV[i + 1] then
    changed = true
    if ARGV[i + 1] == '' then redis.call('HDEL', KEYS[i], job) else redis.call('HSET', KEYS[i], job, ARGV[i + 1]) end
  end
end
if changed then return redis.call('INCR', KEYS[3]) end
return tonumber(redis.call('GET', KEYS[3]) or '0')
