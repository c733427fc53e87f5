-- history.lua: record who did what to a job, a node or the namespace, and announce it:
-- one entry at the end of a bounded history list and one audit event, in one step.
--
-- KEYS[1] the history LIST (job:<id>:history, node:<name>:history or history)
-- KEYS[2] stream STREAM (the namespace's events)
-- KEYS[3] config HASH (stream_maxlen)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2] how many entries the list keeps (the oldest go)
-- ARGV[3] action (submit, scale, stop, drain, quota-set...)
-- ARGV[4] who did it (a Redis user, or ui:<dashboard user>)
-- ARGV[5] what it was done to: "job", "node", or "" for the namespace
-- ARGV[6] the job's id or the node's name ("" for the namespace)
-- ARGV[7] details: a JSON object of strings, whole numbers and booleans
-- ARGV[8..] the details' keys, in the order the event lists them
-- Returns the entry's time (ms).

local ts = now_ms()
redis.call('RPUSH', KEYS[1], '{"ts":' .. int(ts) .. ',"action":' .. cjson.encode(ARGV[3]) ..
  ',"by":' .. cjson.encode(ARGV[4]) .. ',"details":' .. ARGV[7] .. '}')
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)

local fields = {'type', 'audit', 'action', ARGV[3]}
if ARGV[5] ~= '' then
  fields[#fields + 1] = ARGV[5]
  fields[#fields + 1] = ARGV[6]
end
fields[#fields + 1] = 'by'
fields[#fields + 1] = ARGV[4]
local details = cjson.decode(ARGV[7])
for i = 8, #ARGV do
  fields[#fields + 1] = ARGV[i]
  fields[#fields + 1] = details[ARGV[i]]
end
emit(events_to(ARGV[1], KEYS[2], KEYS[3]), fields, ts)
return ts
