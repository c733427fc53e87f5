-- reclaim.lua: return leased tasks to the active queue.
-- With an empty token, only tasks whose lease deadline has passed (by Redis TIME) are
-- returned: any caller may do this for a worker that died. With a token, only tasks still
-- held by that claim are returned (a worker handing back work it will not finish).
-- A returned task loses its lease, so a late commit carrying the old token is refused.
--
-- KEYS[1] q:inflight  ZSET
-- KEYS[2] q:leases    HASH
-- KEYS[3] q:active    ZSET
-- KEYS[4] q:wake      LIST  a token for a waiting worker
-- KEYS[5] stream      STREAM  the namespace's events
-- KEYS[6] config      HASH  stream_maxlen
-- KEYS[7 ..]          task HASH of each task, in the order of the ids in ARGV
-- ARGV[1] fencing token, or "" for expired leases
-- ARGV[2] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[3 ..] task ids
-- Returns the ids that were returned to the active queue.

local now = now_ms()
local token = ARGV[1]
local events = events_to(ARGV[2], KEYS[5], KEYS[6])
local returned = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local task = KEYS[i + 4]
  local deadline = redis.call('ZSCORE', KEYS[1], id)
  local held = redis.call('HGET', KEYS[2], id)
  local eligible
  if token == '' then
    eligible = deadline and tonumber(deadline) <= now
  else
    eligible = deadline and held == token
  end
  if eligible then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    local score = redis.call('HGET', task, 'qscore')
    if score then
      redis.call('ZADD', KEYS[3], score, id)
      returned[#returned + 1] = id
      emit(events, {'type', 'task', 'id', id, 'state', 'pending', 'reason', token == '' and 'lease expired' or 'released'},
        now)
    end
  end
end
if #returned > 0 then wake(KEYS[4]) end
return returned
