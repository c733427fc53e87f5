-- series.lua: one sample of the namespace over time for the dashboard's charts, taken by
-- the workers' upkeep (scheduler/state/series.py): the workers' placed counter, the four
-- queue depths and what live tasks hold, with the ready nodes' capacity the caller
-- counted. Every worker calls it; a sample is appended only when the newest is at least
-- ARGV[1] ms old (by Redis TIME), so several workers add one sample per interval.
--
-- KEYS[1] series            LIST   samples, oldest first (JSON), the last ARGV[2] kept
-- KEYS[2] stats             HASH   the workers' counters (placed)
-- KEYS[3] usage             HASH   what live tasks hold ("<resource>", "tasks"; tenants' fields are left out)
-- KEYS[4] q:active          ZSET
-- KEYS[5] q:backoff         ZSET
-- KEYS[6] q:unschedulable   ZSET
-- KEYS[7] q:inflight        ZSET
-- ARGV[1] the interval between samples (ms)
-- ARGV[2] samples kept
-- ARGV[3] the ready nodes' capacity, "cpu=8000,memory=17179869184" ("" when none)
-- Returns 1 when a sample was appended, 0 when the newest is recent enough.

local now = now_ms()
local newest = redis.call('LINDEX', KEYS[1], -1)
if newest then
  local ts = tonumber(string.match(newest, '^{"ts":(%d+)'))
  if ts and now - ts < tonumber(ARGV[1]) and now >= ts then return 0 end
end
local parts = {'{"ts":' .. int(now), '"placed":' .. int(tonumber(redis.call('HGET', KEYS[2], 'placed') or '0'))}
local queues = {'active', 'backoff', 'unschedulable', 'inflight'}
for i = 1, 4 do
  parts[#parts + 1] = '"' .. queues[i] .. '":' .. int(redis.call('ZCARD', KEYS[3 + i]))
end
local held, tasks = {}, 0
local usage = redis.call('HGETALL', KEYS[3])
for i = 1, #usage, 2 do
  local name, amount = usage[i], tonumber(usage[i + 1]) or 0
  if name == 'tasks' then
    tasks = amount
  elseif not string.find(name, ':', 1, true) then
    held[#held + 1] = '"' .. name .. '":' .. int(amount)
  end
end
parts[#parts + 1] = '"tasks":' .. int(tasks)
parts[#parts + 1] = '"alloc":{' .. table.concat(held, ',') .. '}'
local capacity = {}
for name, amount in string.gmatch(ARGV[3], '([%w_-]+)=(%d+)') do
  capacity[#capacity + 1] = '"' .. name .. '":' .. amount
end
parts[#parts + 1] = '"cap":{' .. table.concat(capacity, ',') .. '}}'
redis.call('RPUSH', KEYS[1], table.concat(parts, ','))
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
return 1
