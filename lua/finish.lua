-- finish.lua: end tasks, from wherever they are, in one atomic step.
-- A pending task leaves every queue (and loses its lease, so an in-flight commit of it is
-- refused). A live task (assigned or running) gives back exactly what commit.lua took:
-- the allocation and host ports recorded on the task, and its tallies. Freed resources
-- are a cluster event: move_cycle catches up with the scheduling cycle.
-- A task already in a terminal state is left alone.
--
-- KEYS[1] q:active  KEYS[2] q:backoff  KEYS[3] q:unschedulable  KEYS[4] q:inflight
-- KEYS[5] q:leases  KEYS[6] nodes:changes  KEYS[7] nodes:seq
-- KEYS[8] q:cycle   KEYS[9] q:move_cycle  KEYS[10] tally:priority
-- then 4 keys per task p (0-based), from b = 11:
--   task HASH, node HASH, node tasks SET, tally:job:<job> ZSET, for the node named in ARGV
-- KEYS[#KEYS - 2] stream STREAM (the namespace's events), KEYS[#KEYS - 1] config HASH (stream_maxlen)
-- KEYS[#KEYS] usage HASH (namespace and tenant usage, see commit.lua)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- then per task: id, new state, message, the node the task is on ("" while pending)
-- Returns per task: the state it left, or "absent", "terminal:<state>", or "elsewhere"
-- (it is not on the node given: it was placed or moved since the caller looked).

local now = now_ms()
local nowtxt = int(now)
local events = events_to(ARGV[1], KEYS[#KEYS - 2], KEYS[#KEYS - 1])
local kb = 11
local out = {}
local freed = false
local p = 0
for a = 2, #ARGV, 4 do
  local id, state, message, expected = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local base = kb + 4 * p
  local task, node, node_tasks, tally_job = KEYS[base], KEYS[base + 1], KEYS[base + 2], KEYS[base + 3]
  p = p + 1
  local cur = redis.call('HMGET', task, 'state', 'node', 'alloc', 'ports', 'job', 'priority', 'tenant')
  local was, on = cur[1], cur[2] or ''
  if not was then
    out[#out + 1] = 'absent'
  elseif was ~= 'pending' and was ~= 'assigned' and was ~= 'running' then
    out[#out + 1] = 'terminal:' .. was
  elseif (was == 'pending' and expected ~= '') or (was ~= 'pending' and on ~= expected) then
    out[#out + 1] = 'elsewhere'
  else
    if was == 'pending' then
      for q = 1, 4 do redis.call('ZREM', KEYS[q], id) end
      redis.call('HDEL', KEYS[5], id)
    else
      release(id, on, cur[3], cur[4], cur[6], {node = node, node_tasks = node_tasks, tally_job = tally_job,
        tally_priority = KEYS[10], changes = KEYS[6], seq = KEYS[7], usage = KEYS[#KEYS]},
        cur[7] or nil)
      freed = true
    end
    redis.call('HSET', task, 'state', state, 'ended_at', nowtxt, 'message', message)
    out[#out + 1] = was
    emit(events, {'type', 'task', 'id', id, 'job', cur[5] or '', 'state', state, 'node', on}, now)
  end
end
if freed then
  redis.call('SET', KEYS[9], redis.call('GET', KEYS[8]) or '0')
end
return out
