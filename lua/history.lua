-- history.lua: record who did what to a job, a node or the namespace, and announce it:
-- one entry at the end of a bounded history list and one audit event, in one step. (A
-- submit that creates tasks is recorded by enqueue.lua or enqueue_many.lua instead, in
-- the call that makes it.)
--
-- KEYS[1] the history LIST (job:<id>:history, node:<name>:history or history)
-- KEYS[2] stream STREAM (the namespace's events)
-- KEYS[3] config HASH (stream_maxlen)
-- ARGV[1] events: channel, and the members every event carries (see events_to in _lib.lua)
-- ARGV[2..] the record (record_at in _lib.lua): how many entries the list keeps (the
--   oldest go), action (submit, scale, stop, drain, quota-set...), who did it (a Redis
--   user, or ui:<dashboard user>), what it was done to ("job", "node", or "" for the
--   namespace), the job's id or the node's name ("" for the namespace), details (a JSON
--   object of strings, whole numbers and booleans), n, then the details' n keys in the
--   order the event lists them
-- Returns the entry's time (ms).

local ts = now_ms()
record(events_to(ARGV[1], KEYS[2], KEYS[3]), KEYS[1], record_at(ARGV, 2), ts)
return ts
