-- tallies.lua: what placement needs to know about several jobs, in one call: the tasks
-- of each job per node (spread, max_per_node) and its recent failures per node (faulty
-- nodes), counting only failures of the job's current version: an update that fixes
-- what failed gets a fresh chance on the node (SwarmKit counts failures per service
-- version).
--
-- KEYS[3j-2] tally:job:<job> ZSET, KEYS[3j-1] faults:<job> ZSET, KEYS[3j] job:<job> HASH,
-- for each job j
-- ARGV[1] failures older than this (ms) no longer count
-- Returns per job: {node, count, node, count, ...}, {"node|task|version", ...} (entries
-- written before versions were recorded, "node|task", count for every version)

local out = {}
for j = 1, #KEYS, 3 do
  -- A job none of whose tasks is placed or has failed (most of a batch of new one-task
  -- jobs) has neither key: one EXISTS instead of two reads.
  local any = redis.call('EXISTS', KEYS[j], KEYS[j + 1]) > 0
  out[#out + 1] = any and redis.call('ZRANGE', KEYS[j], 0, -1, 'WITHSCORES') or {}
  local current = {}
  local faults = any and redis.call('ZRANGEBYSCORE', KEYS[j + 1], ARGV[1], '+inf') or {}
  if #faults > 0 then  -- the job's version is read only when there is a failure to weigh
    local suffix = '|' .. (redis.call('HGET', KEYS[j + 2], 'version') or '')
    for _, entry in ipairs(faults) do
      local _, bars = string.gsub(entry, '|', '')
      if bars < 2 or string.sub(entry, -#suffix) == suffix then current[#current + 1] = entry end
    end
  end
  out[#out + 1] = current
end
return out
