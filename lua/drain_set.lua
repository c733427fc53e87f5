-- drain_set.lua: start, advance or end a node's drain (scheduler/control/drains.py), if it
-- is still in one of the states the caller saw (compare and set: two workers, or a worker
-- and a person, cannot both move it). Starting one (new state "draining") also makes the
-- node's availability drain, in the same step, as node_set.lua does: the node takes no new
-- task from then on. Only fields whose value changes are written; any change is announced
-- (a node event, "drain"). A drain in progress is listed in nodes:drains, which the
-- workers' upkeep reads; one that ended leaves it.
--
-- KEYS[1] drain:<node> HASH  KEYS[2] nodes:drains HASH  KEYS[3] node HASH
-- KEYS[4] nodes:changes ZSET  KEYS[5] nodes:seq STRING  KEYS[6] nodes:epoch STRING
-- KEYS[7] stream STREAM (the namespace's events)  KEYS[8] config HASH (stream_maxlen)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] node name  ARGV[3] the states it may be in, comma-separated ("" for any; "-" for none)
-- ARGV[4] its new state ("" to keep it)
-- ARGV[5] now (ms), or "" for Redis TIME
-- ARGV[6] n, then n field/value pairs
-- Returns {1, state, the node's availability before} or {0, the state it is in ("" for
-- none)}, or {-1} when the node does not exist.

local name = ARGV[2]
local availability = redis.call('HGET', KEYS[3], 'availability')
if not availability then return {-1} end
local state = redis.call('HGET', KEYS[1], 'state') or ''
local allowed = ARGV[3]
if allowed ~= '' and not string.find(',' .. allowed .. ',', ',' .. (state == '' and '-' or state) .. ',', 1, true) then
  return {0, state}
end
local now = clock_ms(ARGV[5])
local writes = {}
local n = tonumber(ARGV[6])
for i = 7, 6 + 2 * n, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) ~= ARGV[i + 1] then
    writes[#writes + 1] = ARGV[i]
    writes[#writes + 1] = ARGV[i + 1]
  end
end
local new = ARGV[4]
if new ~= '' and new ~= state then
  writes[#writes + 1] = 'state'
  writes[#writes + 1] = new
  state = new
end
if state == 'draining' and availability ~= 'drain' then
  redis.call('HSET', KEYS[3], 'availability', 'drain')
  redis.call('ZADD', KEYS[4], redis.call('INCR', KEYS[5]), name)
  redis.call('INCR', KEYS[6])
  emit(events_to(ARGV[1], KEYS[7], KEYS[8]), {'type', 'node', 'name', name, 'availability', 'drain'}, now)
end
if #writes == 0 then return {1, state, availability} end
writes[#writes + 1] = 'updated'
writes[#writes + 1] = int(now)
call_all('HSET', KEYS[1], writes)
if state == 'draining' then
  redis.call('HSET', KEYS[2], name, redis.call('HGET', KEYS[1], 'started_at') or int(now))
else
  redis.call('HDEL', KEYS[2], name)
end
local d = redis.call('HMGET', KEYS[1], 'message', 'stopped', 'left')
emit(events_to(ARGV[1], KEYS[7], KEYS[8]), {'type', 'node', 'name', name, 'event', 'drain', 'state', state,
  'message', d[1] or '', 'stopped', tonumber(d[2] or '0'), 'left', tonumber(d[3] or '0')}, now)
return {1, state, availability}
