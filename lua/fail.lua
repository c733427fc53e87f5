-- fail.lua: requeue claimed tasks that could not be placed in this attempt.
-- Each goes to q:backoff (expiry now + initial * 2^(attempts-1), capped) when a cluster
-- event happened since it was claimed (move_cycle >= token: kube's moveRequestCycle
-- rule, the event may have made room) or when its placement was refused at commit (a
-- conflict with another worker, not a lack of room), otherwise to q:unschedulable until
-- an event or the periodic flush moves it back. The explanation is stored on the task,
-- and the attempt's outcome at the end of the task's attempts list: consecutive attempts
-- with the same explanation (message) share one entry, which spans them and names the
-- queue of the last; the list keeps the last ARGV[6] entries.
--
-- KEYS[1] q:inflight       ZSET
-- KEYS[2] q:leases         HASH
-- KEYS[3] q:backoff        ZSET  task id -> backoff expiry (ms)
-- KEYS[4] q:unschedulable  ZSET  task id -> time it entered (ms)
-- KEYS[5] q:move_cycle     STRING
-- KEYS[6] stream           STREAM  the namespace's events
-- KEYS[7] config           HASH  stream_maxlen
-- KEYS[8 ..]               pairs, in the order of the ids in ARGV: the task HASH, its
--                          task:<id>:attempts LIST
-- ARGV[1] fencing token of the claim
-- ARGV[2] now (ms), or "" for Redis TIME
-- ARGV[3] initial backoff (ms)
-- ARGV[4] maximum backoff (ms)
-- ARGV[5] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[6] entries an attempts list keeps
-- ARGV[7 ..] quadruples: task id, explanation (JSON), "1" if refused at commit, "2" if it
--            waits its turn (its job runs its parallelism: no backoff window, an event or
--            a due flush brings it back at once), else "0", the gang (job id) the task waits
--            with, or "" (then the event has no "gang")
-- Returns one entry per task: "backoff", "unschedulable", or "lease expired" (not ours).
--
-- An attempts entry: {"first": attempt, "last": attempt, "since": ms (of the first), "at":
-- ms (of the last), "queue": "backoff"|"unschedulable" (after the last), "message": the
-- explanation's message, "conflict": true when refused at commit (absent otherwise)}.

local now = clock_ms(ARGV[2])
local token = ARGV[1]
local initial, cap = tonumber(ARGV[3]), tonumber(ARGV[4])
local moved = tonumber(redis.call('GET', KEYS[5]) or '0')
local kept = tonumber(ARGV[6])
local events = events_to(ARGV[5], KEYS[6], KEYS[7])
local out = {}

-- Add this attempt's outcome to the task's attempts list (see the header).
local function record(list, attempts, where, message, conflict)
  local since, first = now, attempts
  local last = redis.call('LINDEX', list, -1)
  if last then
    local previous = cjson.decode(last)
    if previous.message == message and (previous.conflict == true) == conflict then
      since, first = previous.since, previous.first
    else
      last = nil
    end
  end
  local entry = '{"first":' .. int(first) .. ',"last":' .. int(attempts) .. ',"since":' .. int(since) ..
    ',"at":' .. int(now) .. ',"queue":"' .. where .. '","message":' .. cjson.encode(message) ..
    (conflict and ',"conflict":true' or '') .. '}'
  if last then
    redis.call('LSET', list, -1, entry)
  else
    redis.call('RPUSH', list, entry)
    redis.call('LTRIM', list, -kept, -1)
  end
end

local k = 8
for i = 7, #ARGV, 4 do
  local id, explanation, conflict, gang = ARGV[i], ARGV[i + 1], ARGV[i + 2] == '1', ARGV[i + 3]
  local turn = ARGV[i + 2] == '2'
  local task, attempts_list = KEYS[k], KEYS[k + 1]
  k = k + 2
  if redis.call('HGET', KEYS[2], id) ~= token then
    out[#out + 1] = 'lease expired'
  else
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    local attempts = redis.call('HINCRBY', task, 'attempts', 1)
    local delay = initial
    for _ = 2, attempts do
      delay = delay * 2
      if delay >= cap then break end
    end
    if delay > cap then delay = cap end
    if turn then delay = 0 end
    redis.call('HSET', task, 'state', 'pending', 'explanation', explanation,
      'backoff_until', int(now + delay), 'last_cycle', token)
    local where
    if conflict or moved >= tonumber(token) then
      redis.call('ZADD', KEYS[3], now + delay, id)
      where = 'backoff'
    else
      redis.call('ZADD', KEYS[4], now, id)
      where = 'unschedulable'
    end
    out[#out + 1] = where
    local message = cjson.decode(explanation).message
    record(attempts_list, attempts, where, type(message) == 'string' and message or '', conflict)
    if gang ~= '' then
      emit(events, {'type', 'task', 'id', id, 'state', 'pending', 'queue', where, 'gang', gang}, now)
    else
      emit(events, {'type', 'task', 'id', id, 'state', 'pending', 'queue', where}, now)
    end
  end
end
return out
