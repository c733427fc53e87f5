-- claimed.lua: what a worker needs about the tasks it claimed, in one call: each task's
-- job, spec version, pinned node and nominated node, and the text of each job spec
-- version, once per call (a pipeline of HMGETs and HGETs costs a client far more: each
-- reply is parsed on its own).
--
-- KEYS[1 .. n]     task HASHes
-- KEYS[n+1 .. 2n]  the job HASH of each task's job (job:<id>, the id being the task id's
--                  part before its last dot)
-- Returns per task {job, version, pin, nominated_node, spec}: false for a missing field;
-- spec is the job's spec:<version> for the first task of each job version in the call,
-- "" for the others (and false when the job or that version is gone).

local n = #KEYS / 2
local out, seen = {}, {}
for i = 1, n do
  local row = redis.call('HMGET', KEYS[i], 'job', 'version', 'pin', 'nominated_node')
  local spec = ''
  if row[1] and row[2] then
    local version = KEYS[n + i] .. '|' .. row[2]
    if not seen[version] then
      seen[version] = true
      spec = redis.call('HGET', KEYS[n + i], 'spec:' .. row[2])
    end
  end
  row[5] = spec
  out[i] = row
end
return out
