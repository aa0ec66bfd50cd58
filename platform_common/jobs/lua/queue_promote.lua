-- Move retries whose backoff has elapsed from the delayed set to the front of the queue.
-- KEYS[1] delayed zset  KEYS[2] queue list  KEYS[3] waiting zset
-- KEYS[4] high list  KEYS[5] low list (optional, both or neither)
-- ARGV[1] the most jobs to move in one call
-- ARGV[2] the job key prefix (the job hash of id x: prefix .. x; with KEYS[4..5])
-- Levels (queue/priority.py): with KEYS[4..5], a due job whose job hash's `priority` is
-- high or low goes on that level's list (and wakes an idle worker as an enqueue of its
-- level does, include/levels.lua); the others on the queue list. The job hash is read by
-- name, as the claim's take reads a job it takes: every key carries the type's tag.
-- Returns the number of jobs moved. A key of another type is refused with the error
-- reply "CORRUPT <position in KEYS> <problem>" before the first write.
-- @include time
-- @include key_types
-- @include levels
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
if #due == 0 then
    return 0
end
local typed = {{2, 'list'}, {3, 'zset'}}
if KEYS[5] then
    typed[#typed + 1] = {4, 'list'}
    typed[#typed + 1] = {5, 'list'}
end
local refusal = wrong_types(typed)
if refusal then
    return refusal
end
-- Levels: each due job's list, by its job hash's priority (a job hash that is not a
-- hash, or none, is a normal job here: the claim judges it). HGET by pcall: it is a read.
local by_list = {[KEYS[2]] = {}}
local lists = {KEYS[2]}
if KEYS[5] then
    for _, job_id in ipairs(due) do
        local priority = redis.pcall('HGET', ARGV[2] .. job_id, 'priority')
        local list = level_list(type(priority) == 'string' and priority or nil, KEYS[2], KEYS[4],
            KEYS[5])
        if not by_list[list] then
            by_list[list] = {}
            lists[#lists + 1] = list
        end
        by_list[list][#by_list[list] + 1] = job_id
    end
else
    by_list[KEYS[2]] = due
end
-- One command per key for the whole batch (unpack() takes the 2 x 1,000 of a full one).
local arrivals = {}
for _, job_id in ipairs(due) do
    arrivals[#arrivals + 1] = now  -- waiting again from now on
    arrivals[#arrivals + 1] = job_id
end
redis.call('ZREM', KEYS[1], unpack(due))
-- RPUSH: the consuming end; a retry has waited its turn already. The levels' lists first,
-- so an idle worker's wake (below) comes with the queue list's own ids already there.
local woken = 0
for l = #lists, 1, -1 do
    local list = lists[l]
    if #by_list[list] > 0 then
        redis.call('RPUSH', list, unpack(by_list[list]))
        if list ~= KEYS[2] then
            woken = woken + #by_list[list]
        end
    end
end
wake_idle(KEYS[2], woken)
redis.call('ZADD', KEYS[3], unpack(arrivals))
return #due
