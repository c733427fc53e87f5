-- budget_note.lua: count disruptions that did not pass the gate (evict.lua) against the
-- budgets of their jobs, once they happened: tasks evicted by preemption (allowed to go
-- beyond a budget, as in kube, but counted), lost with their node, ended by a NoExecute
-- taint, or stopped by a drain past its deadline or forced. Each task that was counted
-- healthy when it ended takes one from its job's `healthy` and is recorded in the job's
-- disrupted set (as a grant is), so a count working meanwhile does not put it back. Jobs
-- without a budget hash are left alone.
--
-- KEYS: per job, budget:<job> HASH and budget:<job>:disrupted ZSET
-- ARGV[1] now (ms), or "" for Redis TIME
-- then per job: n, then n times: task id, its state and health before it ended
-- Returns how many tasks were counted.

local now = clock_ms(ARGV[1])
local a, counted = 2, 0
for j = 1, #KEYS, 2 do
  local n = tonumber(ARGV[a])
  local b = redis.call('HMGET', KEYS[j], 'healthy', 'checked')
  for i = a + 1, a + 3 * n, 3 do
    if b[1] and counted_healthy(ARGV[i + 1], ARGV[i + 2], b[2]) and not redis.call('ZSCORE', KEYS[j + 1], ARGV[i]) then
      redis.call('ZADD', KEYS[j + 1], now, ARGV[i])
      if redis.call('HINCRBY', KEYS[j], 'healthy', -1) < 0 then redis.call('HSET', KEYS[j], 'healthy', 0) end
      counted = counted + 1
    end
  end
  a = a + 1 + 3 * n
end
return counted
