-- unnominate.lua: release the room a node holds for a task (its nomination), when the
-- task was placed on another node or nominated elsewhere.
--
-- KEYS[1] node HASH  KEYS[2] nodes:changes ZSET  KEYS[3] nodes:seq STRING  KEYS[4] task HASH
-- ARGV[1] task id  ARGV[2] node name
-- Returns 1 when a nomination was released, 0 when there was none.

if redis.call('HGET', KEYS[4], 'nominated_node') == ARGV[2] then
  redis.call('HDEL', KEYS[4], 'nominated_node')
end
if redis.call('HDEL', KEYS[1], 'nom:' .. ARGV[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'nominations', -1)
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), ARGV[2])
return 1
