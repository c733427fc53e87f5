-- task_states.lua: the state of many tasks as one reply (a page of jobs' task counts:
-- state/job_pages.py). Reads only; the caller sends at most 1000 keys a call.
--
-- KEYS task:<id> HASH, any number
-- Returns each task's state, in order (nil for a task that does not exist).

local out = {}
for i = 1, #KEYS do out[i] = redis.call('HGET', KEYS[i], 'state') end
return out
