-- move_set.lua: change a move, if it is still in one of the states the caller saw
-- (compare and set: two workers advancing moves cannot both move one on). Writes the
-- fields given; a new state is announced. Naming the move's new task (field new_task)
-- records it in moves:tasks; a move that ends (done, abandoned) leaves moves:active and
-- moves:tasks and enters moves:ended, for retention.
--
-- KEYS[1] move:<id>      HASH
-- KEYS[2] moves:active   ZSET
-- KEYS[3] moves:tasks    HASH  task id -> move in progress
-- KEYS[4] moves:ended    ZSET  move id -> when it ended (ms)
-- KEYS[5] stream         STREAM  the namespace's events
-- KEYS[6] config         HASH  stream_maxlen
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] the states it may be in, comma-separated ("" for any)
-- ARGV[3] its new state ("" to keep it)
-- ARGV[4] n, then n field/value pairs
-- ARGV[#ARGV] now (ms), or "" for Redis TIME (see clock_ms)
-- Returns {1, state} or {0, the state it is in ("" when there is no such move)}.

local key = KEYS[1]
local cur = redis.call('HMGET', key, 'state', 'id', 'job', 'task', 'from', 'to', 'new_task')
local state = cur[1]
if not state then return {0, ''} end
if ARGV[2] ~= '' and not string.find(',' .. ARGV[2] .. ',', ',' .. state .. ',', 1, true) then
  return {0, state}
end
local now = clock_ms(ARGV[#ARGV])
local writes = {'updated', int(now)}
local n = tonumber(ARGV[4])
local new_task = cur[7]
for i = 5, 4 + 2 * n, 2 do
  writes[#writes + 1] = ARGV[i]
  writes[#writes + 1] = ARGV[i + 1]
  if ARGV[i] == 'new_task' and ARGV[i + 1] ~= '' then
    new_task = ARGV[i + 1]
    redis.call('HSET', KEYS[3], new_task, cur[2])
  end
end
local new = ARGV[3]
local changed = new ~= '' and new ~= state
if changed then
  writes[#writes + 1] = 'state'
  writes[#writes + 1] = new
  state = new
end
if state == 'done' or state == 'abandoned' then
  if changed then
    writes[#writes + 1] = 'ended'
    writes[#writes + 1] = int(now)
  end
  redis.call('ZREM', KEYS[2], cur[2])
  redis.call('ZADD', KEYS[4], now, cur[2])
  for _, task in ipairs({cur[4], new_task or ''}) do
    if task ~= '' and redis.call('HGET', KEYS[3], task) == cur[2] then redis.call('HDEL', KEYS[3], task) end
  end
end
call_all('HSET', key, writes)
if changed then
  local event = {'type', 'move', 'id', cur[2], 'job', cur[3], 'task', cur[4], 'from', cur[5], 'to', cur[6],
                 'state', state}
  if new_task then
    event[#event + 1] = 'new_task'
    event[#event + 1] = new_task
  end
  local message = redis.call('HGET', key, 'message')
  if message and message ~= '' then
    event[#event + 1] = 'message'
    event[#event + 1] = message
  end
  emit(events_to(ARGV[1], KEYS[5], KEYS[6]), event, now)
end
return {1, state}
