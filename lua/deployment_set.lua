-- deployment_set.lua: change a deployment, if it is still in one of the states the caller
-- saw (compare and set: two workers, or a worker and a person, cannot both move it). Only
-- fields whose value changes are written; any change is published. A deployment leaves
-- deployments:active when it ends, unless a revert is still to be made for it
-- (revert = "pending": the worker that makes it sets it to "done").
--
-- KEYS[1] deployment:<id>      HASH
-- KEYS[2] deployments:active   ZSET
-- KEYS[3] job:<id>             HASH
-- KEYS[4] stream               STREAM  the namespace's events
-- KEYS[5] config               HASH  stream_maxlen
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] the states it may be in, comma-separated ("" for any)
-- ARGV[3] its new state ("" to keep it)
-- ARGV[4] "1" to record its version as the job's last healthy one (job field stable)
-- ARGV[5] n, then n field/value pairs
-- Returns {1, state, changed (0/1)} or {0, the state it is in ("" when there is none)}.

local key = KEYS[1]
local cur = redis.call('HMGET', key, 'state', 'id', 'job', 'to')
local state = cur[1]
if not state then return {0, ''} end
if ARGV[2] ~= '' and not string.find(',' .. ARGV[2] .. ',', ',' .. state .. ',', 1, true) then
  return {0, state}
end
local now = now_ms()
local writes = {}
local n = tonumber(ARGV[5])
for i = 6, 5 + 2 * n, 2 do
  if redis.call('HGET', key, ARGV[i]) ~= ARGV[i + 1] then
    writes[#writes + 1] = ARGV[i]
    writes[#writes + 1] = ARGV[i + 1]
  end
end
local new = ARGV[3]
if new ~= '' and new ~= state then
  writes[#writes + 1] = 'state'
  writes[#writes + 1] = new
  state = new
end
if #writes == 0 then return {1, state, 0} end
writes[#writes + 1] = 'updated'
writes[#writes + 1] = int(now)
call_all('HSET', key, writes)
if ARGV[4] == '1' then redis.call('HSET', KEYS[3], 'stable', cur[4]) end
local ended = state ~= 'running' and state ~= 'paused' and state ~= 'awaiting_promotion'
if ended and redis.call('HGET', key, 'revert') ~= 'pending' then redis.call('ZREM', KEYS[2], cur[2]) end
local event = {'type', 'deployment', 'id', cur[2], 'job', cur[3], 'state', state}
for _, name in ipairs({'to_desired', 'to_placed', 'to_healthy', 'to_unhealthy', 'from_placed', 'from_healthy'}) do
  event[#event + 1] = name
  event[#event + 1] = tonumber(redis.call('HGET', key, name) or '0')
end
emit(events_to(ARGV[1], KEYS[4], KEYS[5]), event, now)
return {1, state, 1}
