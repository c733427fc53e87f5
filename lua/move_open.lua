-- move_open.lua: record the moves of a rebalance plan, all or none, only if the cluster is
-- still as the plan read it: a plan made on stale state is refused, not half done. The
-- plan carries what it read before it read the nodes: nodes:epoch (nodes added, removed or
-- relabelled), the change sequence of every node a move leaves or goes to (any placement,
-- end or change of the node since moves it on), the version and last update of each job
-- it moves (a new version, a scale, a restart or a stop since changes them), and each
-- task's node (still running there, and in no other move).
--
-- KEYS[1] nodes:epoch    STRING
-- KEYS[2] nodes:changes  ZSET  node -> change sequence
-- KEYS[3] moves          ZSET  every move kept -> plan * 10000 + its index in the plan
-- KEYS[4] moves:active   ZSET  the moves in progress, scored as in moves
-- KEYS[5] moves:tasks    HASH  task id -> the move in progress it belongs to (old and new tasks)
-- KEYS[6] stream         STREAM  the namespace's events
-- KEYS[7] config         HASH  stream_maxlen
-- then per job j of the J in ARGV: job HASH
-- then per move m of the M: task HASH of the task it moves, move HASH
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] plan id (a whole number)
-- ARGV[3] nodes:epoch as read ("" when it did not exist)
-- ARGV[4] the most moves that may be in progress at once (those of this plan included)
-- ARGV[5] N, then N x (node, its change sequence as read, "" when it had none)
-- then J, then J x (job id, its version as read, its updated field as read)
-- then M, then M x (task id, job id, from node, to node, strategy, score (JSON), reason)
-- ARGV[#ARGV] now (ms), or "" for Redis TIME (see clock_ms)
-- Returns {1, now, first move's score} or {0, why the plan is refused (one sentence)}.

local a = 5
local N = tonumber(ARGV[a])
if (redis.call('GET', KEYS[1]) or '') ~= ARGV[3] then
  return {0, 'nodes were added, removed or changed since the plan was made'}
end
for i = 1, N do
  local node, seq = ARGV[a + 2 * i - 1], ARGV[a + 2 * i]
  local now_seq = redis.call('ZSCORE', KEYS[2], node)
  if (now_seq and int(tonumber(now_seq)) or '') ~= seq then
    return {0, 'node ' .. node .. ' changed since the plan was made'}
  end
end
a = a + 2 * N + 1
local J = tonumber(ARGV[a])
local versions = {}
for j = 1, J do
  local job, version, updated = ARGV[a + 3 * j - 2], ARGV[a + 3 * j - 1], ARGV[a + 3 * j]
  versions[job] = version
  local cur = redis.call('HMGET', KEYS[7 + j], 'version', 'status', 'updated')
  if cur[1] ~= version or (cur[2] or 'running') ~= 'running' or (cur[3] or '') ~= updated then
    return {0, 'job ' .. job .. ' changed since the plan was made'}
  end
end
a = a + 3 * J + 1
local M = tonumber(ARGV[a])
local active = redis.call('ZCARD', KEYS[4])
if active + M > tonumber(ARGV[4]) then
  return {0, active .. ' moves are in progress; ' .. M .. ' more would pass the most there may be, ' .. ARGV[4]}
end
local base = 7 + J
for m = 1, M do
  local at = a + 7 * (m - 1)
  local task, from = ARGV[at + 1], ARGV[at + 3]
  local cur = redis.call('HMGET', KEYS[base + 2 * m - 1], 'state', 'node')
  if cur[1] ~= 'running' or cur[2] ~= from then
    return {0, 'task ' .. task .. ' no longer runs on ' .. from}
  end
  local other = redis.call('HGET', KEYS[5], task)
  if other then return {0, 'task ' .. task .. ' is being moved already (move ' .. other .. ')'} end
end

local now = clock_ms(ARGV[#ARGV])
local events = events_to(ARGV[1], KEYS[6], KEYS[7])
local plan = ARGV[2]
local first = tonumber(plan) * 10000 + 1
for m = 1, M do
  local at = a + 7 * (m - 1)
  local id = plan .. '-' .. m
  local task, job, from, to = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4]
  redis.call('HSET', KEYS[base + 2 * m], 'id', id, 'plan', plan, 'task', task, 'job', job, 'from', from, 'to', to,
    'strategy', ARGV[at + 5], 'score', ARGV[at + 6], 'reason', ARGV[at + 7], 'state', 'queued', 'created', int(now),
    'updated', int(now), 'version', versions[job] or '')
  redis.call('ZADD', KEYS[3], first + m - 1, id)
  redis.call('ZADD', KEYS[4], first + m - 1, id)
  redis.call('HSET', KEYS[5], task, id)
  emit(events, {'type', 'move', 'id', id, 'job', job, 'task', task, 'from', from, 'to', to, 'state', 'queued'}, now)
end
return {1, now, first}
