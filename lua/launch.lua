-- launch.lua: create a child job of a periodic or parameterized job, exactly once.
--
-- A tick of a periodic job is claimed by its time: the call is refused unless the parent's
-- next_launch is still the tick the caller computed (ARGV[5]), and it moves next_launch to
-- the following tick in the same step, so of any number of workers that see the tick due,
-- one launches it and the others are refused; a tick is never launched twice, whatever
-- the history limits later remove. A forced launch or a tick under overlap "forbid" also
-- compares the parent's count of launches (ARGV[6]): a launch made since the caller saw
-- the previous one end refuses it. A dispatch with an idempotency token that the parent
-- has seen returns the child it made instead.
--
-- The child is created with its hash only (spec, version 1, next_index already counting
-- its tasks) and a filling mark (see enqueue.lua's fill calls): the caller creates the
-- tasks right after, and if it dies first, any worker does after the grace of jobs:filling.
-- A child of a job with `after` dependencies is held (its tasks wait in q:waiting).
--
-- KEYS[1] job:<parent>            HASH
-- KEYS[2] job:<child>             HASH
-- KEYS[3] jobs                    SET
-- KEYS[4] jobs:shares             HASH
-- KEYS[5] jobs:filling            ZSET
-- KEYS[6] job:<parent>:children   ZSET  child -> launched (ms)
-- KEYS[7] jobs:periodic           ZSET  periodic job -> next launch (ms)
-- KEYS[8] job:<parent>:tokens     HASH  idempotency token -> child
-- KEYS[9] jobs:held               ZSET
-- KEYS[10] jobs:global            SET
-- KEYS[11] stream                 STREAM  the namespace's events
-- KEYS[12] config                 HASH  stream_maxlen
-- KEYS[13] job:<parent>:history   LIST
-- KEYS[14] jobs:byid               ZSET  every job id, score 0: the index lists are paged by
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] how: "tick", "force" or "dispatch"
-- ARGV[3] parent id
-- ARGV[4] child id
-- ARGV[5] the tick (ms) the parent's next_launch must still be ("" not to compare)
-- ARGV[6] the parent's count of launches it must still have ("" not to compare)
-- ARGV[7] the parent's next launch after this one (ms; "+inf": none), written with a tick ("" for no change)
-- ARGV[8] idempotency token ("" for none)
-- ARGV[9] the child's jobs:shares value
-- ARGV[10] "1" when the child runs on every eligible node (sysbatch: in jobs:global), else "0"
-- ARGV[11] "1" when the child is held by its dependencies, else "0"
-- ARGV[12] ticks skipped before this one, recorded in the parent's history: "" or
--          "<reason>|<first tick ms>|<last tick ms>|<count>"
-- ARGV[13] how many entries the parent's history keeps
-- ARGV[14] who launches it (recorded in the parent's history): a user, or "sched" for a tick
-- ARGV[15] "1" to create a child, "0" to record the tick (and what it skipped) alone
-- ARGV[16] n, then n field/value pairs of the child's hash ("created" and "updated" are
--          set here to Redis TIME)
-- Returns {1, child, now} when it created the child, {2, child} when the token named one
-- already, {0, why} when refused: "gone" (no such parent), "stopped" (the parent is not
-- running), "tick" (the tick was claimed meanwhile), "launched" (a launch happened
-- meanwhile), "exists" (a job with the child's id exists), or {3, now} when it recorded a
-- tick without a child.

local parent, child = KEYS[1], KEYS[2]
local how, parent_id, child_id = ARGV[2], ARGV[3], ARGV[4]
local cur = redis.call('HMGET', parent, 'status', 'next_launch', 'launches')
if not cur[1] then return {0, 'gone'} end
if ARGV[8] ~= '' then
  local made = redis.call('HGET', KEYS[8], ARGV[8])
  if made then return {2, made} end
end
if cur[1] ~= 'running' then return {0, 'stopped'} end
if ARGV[5] ~= '' and (cur[2] or '') ~= ARGV[5] then return {0, 'tick'} end
if ARGV[6] ~= '' and (cur[3] or '0') ~= ARGV[6] then return {0, 'launched'} end
local create = ARGV[15] == '1'
if create and redis.call('EXISTS', child) == 1 then return {0, 'exists'} end

local now = now_ms()
local events = events_to(ARGV[1], KEYS[11], KEYS[12])
local keep = tonumber(ARGV[13])
if ARGV[7] ~= '' then
  local next_launch = ARGV[7]
  redis.call('HSET', parent, 'next_launch', next_launch)
  redis.call('ZADD', KEYS[7], next_launch == '+inf' and '+inf' or tonumber(next_launch), parent_id)
end
if ARGV[12] ~= '' then
  local reason, first, last, count = string.match(ARGV[12], '^([^|]*)|(%d+)|(%d+)|(%d+)$')
  redis.call('HINCRBY', parent, 'missed', tonumber(count))
  remember(KEYS[13], keep, '{"ts":' .. int(now) .. ',"action":"missed","by":"sched","details":{"reason":' ..
    cjson.encode(reason) .. ',"first":' .. first .. ',"last":' .. last .. ',"count":' .. count .. '}}')
  emit(events, {'type', 'job', 'id', parent_id, 'event', 'missed', 'reason', reason, 'first', tonumber(first),
    'last', tonumber(last), 'count', tonumber(count)}, now)
end
if not create then return {3, now} end

local fields = {}
local n = tonumber(ARGV[16])
for i = 17, 16 + 2 * n do fields[#fields + 1] = ARGV[i] end
fields[#fields + 1] = 'created'
fields[#fields + 1] = int(now)
fields[#fields + 1] = 'updated'
fields[#fields + 1] = int(now)
call_all('HSET', child, fields)
redis.call('SADD', KEYS[3], child_id)
redis.call('ZADD', KEYS[14], 0, child_id)
redis.call('HSET', KEYS[4], child_id, ARGV[9])
redis.call('ZADD', KEYS[5], now, child_id)
redis.call('ZADD', KEYS[6], now, child_id)
if ARGV[10] == '1' then redis.call('SADD', KEYS[10], child_id) end
if ARGV[11] == '1' then redis.call('ZADD', KEYS[9], 'NX', now, child_id) end
if ARGV[8] ~= '' then redis.call('HSET', KEYS[8], ARGV[8], child_id) end
local launches = redis.call('HINCRBY', parent, 'launches', 1)
redis.call('HSET', parent, 'last_child', child_id, 'last_launch', int(now))
emit(events, {'type', 'job', 'id', child_id, 'event', 'launched', 'parent', parent_id, 'how', how,
  'version', 1}, now)
remember(KEYS[13], keep, '{"ts":' .. int(now) .. ',"action":"launch","by":' .. cjson.encode(ARGV[14]) ..
  ',"details":{"child":' ..
  cjson.encode(child_id) .. ',"how":' .. cjson.encode(how) .. ',"launches":' .. int(launches) .. '}}')
return {1, child_id, now}
