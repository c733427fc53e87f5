-- tallies.lua: what placement needs to know about several jobs, in one call: the tasks
-- of each job per node (spread, max_per_node) and its recent failures per node (faulty
-- nodes).
--
-- KEYS[2j-1] tally:job:<job> ZSET, KEYS[2j] faults:<job> ZSET, for each job j
-- ARGV[1] failures older than this (ms) no longer count
-- Returns per job: {node, count, node, count, ...}, {"node|task", ...}

local out = {}
for j = 1, #KEYS, 2 do
  out[#out + 1] = redis.call('ZRANGE', KEYS[j], 0, -1, 'WITHSCORES')
  out[#out + 1] = redis.call('ZRANGEBYSCORE', KEYS[j + 1], ARGV[1], '+inf')
end
return out
