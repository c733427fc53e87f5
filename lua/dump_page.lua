-- dump_page.lua: one page of a namespace's snapshot (scheduler/state/snapshots.py): the
-- DUMP and the time to live of each key given, in one step, with the namespace's change
-- mark. Read-only. Every script that changes a namespace either appends to its stream or
-- moves one of the counters the mark holds (but series.lua, whose samples for the
-- dashboard stand alone), so pages read under one mark, read before the keys were
-- listed, hold the namespace as it was at one moment.
--
-- KEYS[1] stream         STREAM  the namespace's events (its newest entry id)
-- KEYS[2] q:cycle        STRING  claims (claim.lua announces nothing)
-- KEYS[3] nodes:seq      STRING  node changes (unnominate.lua, sched audit --repair)
-- KEYS[4] q:seq          STRING  tasks queued (sched audit --repair)
-- KEYS[5] q:move_cycle   STRING  cluster events (SchedulingQueue.cluster_event)
-- KEYS[6 ..]                     the keys to dump, in the caller's order
-- ARGV[1] stop once the payloads passed this many bytes (the rest go in the next page)
-- Returns {mark, keys dumped, then per key dumped: its PTTL (-1: none, -2: gone), its
-- DUMP payload ("" when gone)}.

local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local mark = (last[1] and last[1][1] or '0-0') .. '|' .. (redis.call('GET', KEYS[2]) or '0') .. '|' ..
  (redis.call('GET', KEYS[3]) or '0') .. '|' .. (redis.call('GET', KEYS[4]) or '0') .. '|' ..
  (redis.call('GET', KEYS[5]) or '0')
local out = {mark, 0}
local budget, bytes, done = tonumber(ARGV[1]), 0, 0
for i = 6, #KEYS do
  if bytes >= budget then break end
  local payload = redis.call('DUMP', KEYS[i])
  if payload then
    out[#out + 1] = redis.call('PTTL', KEYS[i])
    out[#out + 1] = payload
    bytes = bytes + #payload
  else
    out[#out + 1] = -2
    out[#out + 1] = ''
  end
  done = done + 1
end
out[2] = done
return out
