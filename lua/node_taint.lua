-- node_taint.lua: add a taint to a node (replacing one of the same key and effect), or
-- remove the taints of a key (of one effect, or all). The node's taints are one field,
-- "taints": space-separated "key=value:Effect" ("key:Effect" for an empty value), each
-- NoExecute taint followed by "@<ms>", when it was added (scheduler/model/taints.py).
-- A changed node is re-read by the workers (nodes:changes), may change where global jobs
-- run (nodes:epoch), and, when a taint went away, is a cluster event (tasks waiting may
-- now fit). nodes:noexecute lists the nodes with a NoExecute taint, for the evictions.
--
-- KEYS[1] node HASH
-- KEYS[2] nodes:changes ZSET
-- KEYS[3] nodes:seq STRING
-- KEYS[4] q:cycle STRING
-- KEYS[5] q:move_cycle STRING
-- KEYS[6] nodes:epoch STRING
-- KEYS[7] nodes:noexecute SET
-- KEYS[8] stream STREAM (the namespace's events)
-- KEYS[9] config HASH (stream_maxlen)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] node name
-- ARGV[3] "add" or "remove"
-- ARGV[4] key  ARGV[5] value (add)  ARGV[6] effect ("" with remove: every effect)
-- ARGV[7] now (ms), or "" for Redis TIME: a test's or a simulation's clock (see clock_ms)
-- Returns {the taints before, the taints after}, or false when the node does not exist.

if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local name, mode, key, value, effect = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local now = clock_ms(ARGV[7])
local before = redis.call('HGET', KEYS[1], 'taints') or ''
-- Every taint but those of the key (and effect) given; adding the same taint again keeps
-- it, with its time.
local kept, found = {}, false
local wanted = key .. (value ~= '' and ('=' .. value) or '') .. ':' .. effect
for entry in string.gmatch(before, '%S+') do
  local k, e = string.match(entry, '^([^=:@]+)=?[^:@]*:(%a+)')
  if k == key and (effect == '' or e == effect) then
    if mode == 'add' and (string.match(entry, '^([^@]*)') == wanted) then
      kept[#kept + 1] = entry
      found = true
    end
  else
    kept[#kept + 1] = entry
  end
end
if mode == 'add' and not found then
  kept[#kept + 1] = effect == 'NoExecute' and (wanted .. '@' .. int(now)) or wanted
end
local after = table.concat(kept, ' ')
if after ~= before then
  if after == '' then redis.call('HDEL', KEYS[1], 'taints') else redis.call('HSET', KEYS[1], 'taints', after) end
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), name)
  redis.call('INCR', KEYS[6])
  if mode == 'remove' then redis.call('SET', KEYS[5], redis.call('GET', KEYS[4]) or '0') end
  if string.find(after, ':NoExecute', 1, true) then
    redis.call('SADD', KEYS[7], name)
  else
    redis.call('SREM', KEYS[7], name)
  end
  emit(events_to(ARGV[1], KEYS[8], KEYS[9]), {'type', 'node', 'name', name, 'event', mode == 'add' and 'tainted' or
    'untainted', 'taints', after}, now)
end
return {before, after}
