-- pool_put.lua: add or replace a pool in the namespace's catalogue of node shapes
-- (scheduler/state/pools.py), refusing a new one once the catalogue holds its bound.
--
-- KEYS[1] pools   HASH   pool name -> the pool as JSON (scheduler/model/pools.py to_dict)
-- ARGV[1] the pool's name
-- ARGV[2] the pool as JSON
-- ARGV[3] how many pools the catalogue may hold
-- Returns 1 when the pool is new, 0 when it replaced one, -1 when the catalogue is full.

local known = redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1
if not known and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if known then return 0 end
return 1
