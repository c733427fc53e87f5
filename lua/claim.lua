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
-- ARGV[3] optional: share with other workers. Take half of what is waiting, but at least
--         this many (and at most ARGV[1]), so that a short queue is worked on by several
--         workers at once instead of by whichever claims first.
-- Returns {now_ms} when the queue is empty, else {now_ms, token, tasks still waiting, task id, ...}.

local now = now_ms()
local count = tonumber(ARGV[1])
if ARGV[3] then
  local half = math.ceil(redis.call('ZCARD', KEYS[1]) / 2)
  count = math.min(count, math.max(tonumber(ARGV[3]), half))
end
local popped = redis.call('ZPOPMIN', KEYS[1], count)
if #popped == 0 then
  return {now}
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
