-- claim.lua: lease up to N tasks from the head of the active queue.
-- The tasks move to q:inflight scored by their lease deadline (Redis TIME + lease),
-- and each is recorded in the leases hash with this claim's fencing token. The token is
-- the new value of the scheduling-cycle counter, so it also tells the failure path
-- whether a cluster event happened after the claim (kube's moveRequestCycle rule).
--
-- KEYS[1] q:active       ZSET  task id -> queue score (priority, then age)
-- KEYS[2] q:inflight     ZSET  task id -> lease deadline (ms)
-- KEYS[3] q:leases       HASH  task id -> fencing token
-- KEYS[4] q:cycle        STRING scheduling cycle counter
-- ARGV[1] how many tasks at most
-- ARGV[2] lease length (ms)
-- ARGV[3] share with other workers ("" not to): take half of what is waiting, but at
--         least this many (and at most ARGV[1]), so that a short queue is worked on by
--         several workers at once instead of by whichever claims first.
-- ARGV[4] keep a job together, up to this many more tasks ("" or 0 not to): when the
--         claim ends inside a job (the next waiting tasks are of the job of the last one
--         taken, as a task id "<job>.<index>" says), take those too, so that one worker
--         places the job in one pass instead of two workers placing parts of it against
--         each other.
-- Returns {now_ms} when the queue is empty, else {now_ms, token, tasks still waiting, task id, ...}.

local now = now_ms()
local count = tonumber(ARGV[1])
if ARGV[3] and ARGV[3] ~= '' then
  local half = math.ceil(redis.call('ZCARD', KEYS[1]) / 2)
  count = math.min(count, math.max(tonumber(ARGV[3]), half))
end
local popped = redis.call('ZPOPMIN', KEYS[1], count)
if #popped == 0 then
  return {now}
end
local tail = tonumber(ARGV[4] or '') or 0
if tail > 0 and #popped == 2 * count then
  local job = string.match(popped[#popped - 1], '^(.+)%.%d+$')
  local next_ids = redis.call('ZRANGE', KEYS[1], 0, tail - 1)
  local same = 0
  while job and same < #next_ids and string.match(next_ids[same + 1], '^(.+)%.%d+$') == job do
    same = same + 1
  end
  if same > 0 then
    local more = redis.call('ZPOPMIN', KEYS[1], same)
    for i = 1, #more do popped[#popped + 1] = more[i] end
  end
end
local token = redis.call('INCR', KEYS[4])
local deadline = now + tonumber(ARGV[2])
local out, inflight, leases = {now, token, redis.call('ZCARD', KEYS[1])}, {}, {}
for i = 1, #popped, 2 do
  local id = popped[i]
  inflight[#inflight + 1] = deadline
  inflight[#inflight + 1] = id
  leases[#leases + 1] = id
  leases[#leases + 1] = token
  out[#out + 1] = id
end
call_all('ZADD', KEYS[2], inflight)
call_all('HSET', KEYS[3], leases)
return out
