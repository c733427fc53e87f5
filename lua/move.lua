-- move.lua: move waiting tasks back towards the active queue.
-- From q:backoff: only entries whose expiry is due. From q:unschedulable: entries that
-- entered at or before ARGV[3] (the 60 s leftover flush, or every entry after a cluster
-- event); a task still inside its backoff window goes to q:backoff, the rest to q:active
-- with their original queue score (priority, then age). Each move is announced: a task
-- event with "queue" saying where the task went.
--
-- KEYS[1] source ZSET (q:backoff or q:unschedulable)
-- KEYS[2] q:active   ZSET
-- KEYS[3] q:backoff  ZSET
-- KEYS[4] q:wake     LIST  a token for a waiting worker when tasks go to q:active
-- KEYS[5] stream     STREAM  the namespace's events
-- KEYS[6] config     HASH  stream_maxlen
-- KEYS[7 ..]         task HASH of each task, in the order of the ids in ARGV
-- ARGV[1] now (ms), or "" for Redis TIME
-- ARGV[2] "backoff" or "unschedulable" (what KEYS[1] is)
-- ARGV[3] latest entry score to move (ms; for backoff, ignored: now is used)
-- ARGV[4] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[5 ..] task ids
-- Returns {moved to active, moved to backoff}.

local now = clock_ms(ARGV[1])
local from_backoff = ARGV[2] == 'backoff'
local latest = from_backoff and now or tonumber(ARGV[3])
local events = events_to(ARGV[4], KEYS[5], KEYS[6])
local to_active, to_backoff = 0, 0
for i = 5, #ARGV do
  local id = ARGV[i]
  local task = KEYS[i + 2]
  local score = redis.call('ZSCORE', KEYS[1], id)
  if score and tonumber(score) <= latest then
    redis.call('ZREM', KEYS[1], id)
    local until_ms = tonumber(redis.call('HGET', task, 'backoff_until') or '0')
    if not from_backoff and until_ms > now then
      redis.call('ZADD', KEYS[3], until_ms, id)
      to_backoff = to_backoff + 1
      emit(events, {'type', 'task', 'id', id, 'state', 'pending', 'queue', 'backoff'}, now)
    else
      local qscore = redis.call('HGET', task, 'qscore')
      if qscore then
        redis.call('ZADD', KEYS[2], qscore, id)
        to_active = to_active + 1
        emit(events, {'type', 'task', 'id', id, 'state', 'pending', 'queue', 'active'}, now)
      end
    end
  end
end
if to_active > 0 then wake(KEYS[4]) end
return {to_active, to_backoff}
