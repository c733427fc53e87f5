-- finish.lua: end tasks, from wherever they are, in one atomic step.
-- A pending task leaves every queue (and loses its lease, so an in-flight commit of it is
-- refused). A live task (assigned or running) gives back exactly what commit.lua took:
-- the allocation and host ports recorded on the task, and its tallies. Freed resources
-- are a cluster event: move_cycle catches up with the scheduling cycle.
-- A preemptor that ends while pending gives back the room its nominated node holds for
-- it, a cluster event too. A task already in a terminal state is left alone. (The step itself is end_task in
-- _lib.lua, which replace.lua shares.)
--
-- KEYS[1] q:active  KEYS[2] q:backoff  KEYS[3] q:unschedulable  KEYS[4] q:inflight
-- KEYS[5] q:leases  KEYS[6] nodes:changes  KEYS[7] nodes:seq
-- KEYS[8] q:cycle   KEYS[9] q:move_cycle  KEYS[10] tally:priority
-- then 6 keys per task p (0-based), from b = 11:
--   task HASH, node HASH (of the node named in ARGV; for a pending task, of its nominated
--   node, whose room held for it goes back), node tasks SET and tally:job:<job> ZSET (for
--   the node named in ARGV),
--   faults:<job> ZSET (written when a live task ends as failed), tally:dom:<job> HASH
-- KEYS[#KEYS - 4] stream STREAM (the namespace's events), KEYS[#KEYS - 3] config HASH (stream_maxlen)
-- KEYS[#KEYS - 2] usage HASH (namespace and tenant usage, see commit.lua)
-- KEYS[#KEYS - 1] tasks:ended ZSET (each task that ends is added, for retention)
-- KEYS[#KEYS] q:waiting ZSET (tasks of jobs held by their dependencies)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] how long a failure counts in faults:<job> (ms)
-- then per task: id, new state, message, the node the task is on ("" while pending)
-- ARGV[#ARGV] now (ms), or "" for Redis TIME: a simulation's virtual clock (see clock_ms)
-- Returns per task: the state it left, or "absent", "terminal:<state>", or "elsewhere"
-- (it is not on the node given: it was placed or moved since the caller looked).

local now = clock_ms(ARGV[#ARGV])
local events = events_to(ARGV[1], KEYS[#KEYS - 4], KEYS[#KEYS - 3])
local fault_window = tonumber(ARGV[2])
local out = {}
local any_freed = false
local p = 0
for a = 3, #ARGV - 1, 4 do
  local base = 11 + 6 * p
  p = p + 1
  local result, freed = end_task(ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
    {task = KEYS[base], node = KEYS[base + 1], node_tasks = KEYS[base + 2], tally_job = KEYS[base + 3],
     faults = KEYS[base + 4], tally_dom = KEYS[base + 5], fault_window = fault_window,
     queues = {KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[#KEYS]}, leases = KEYS[5], tally_priority = KEYS[10],
     changes = KEYS[6], seq = KEYS[7], usage = KEYS[#KEYS - 2], ended = KEYS[#KEYS - 1]}, events, now)
  out[#out + 1] = result
  any_freed = any_freed or freed
end
if any_freed then
  redis.call('SET', KEYS[9], redis.call('GET', KEYS[8]) or '0')
end
return out
