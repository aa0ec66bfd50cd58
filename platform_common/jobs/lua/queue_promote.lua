-- Move retries whose backoff has elapsed from the delayed set to the front of the queue.
-- KEYS[1] delayed zset  KEYS[2] queue list  KEYS[3] waiting zset
-- KEYS[4] high list  KEYS[5] low list (optional, both or neither)
-- KEYS[6] fair share's ring (optional, after KEYS[4..5]; keys.py `fair`)
-- ARGV[1] the most jobs to move in one call
-- ARGV[2] the job key prefix (the job hash of id x: prefix .. x; with KEYS[4..5])
-- Levels (queue/priority.py): with KEYS[4..5], a due job whose job hash's `priority` is
-- high or low goes on that level's list (and wakes an idle worker as an enqueue of its
-- level does, include/levels.lua); the others on the queue list. The job hash is read by
-- name, as the claim's take reads a job it takes: every key carries the type's tag.
-- Fair share (include/fair_keys.lua): with KEYS[6], a due normal job whose job hash
-- keeps a `fair_key` (a retry of a job started from its key's list, or a scheduled job
-- enqueued with a fairness key) goes on that key's list, `<ring>:q:<key>`, at the
-- consuming end too, the key into the ring if its list was empty, and wakes an idle
-- worker as a level's job does. A key list is in no KEYS: one of another type is refused with
-- "CORRUPT 0 <key> <problem>" before the first write.
-- Returns the number of jobs moved. A key of another type is refused with the error
-- reply "CORRUPT <position in KEYS> <problem>" before the first write.
-- @include time
-- @include key_types
-- @include levels
-- @include fair_keys
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
local ring = KEYS[6]  -- Fair share (optional)
if ring then
    typed[#typed + 1] = {6, 'list'}
end
local refusal = wrong_types(typed)
if refusal then
    return refusal
end
-- Levels: each due job's list, by its job hash's priority (a job hash that is not a
-- hash, or none, is a normal job here: the claim judges it); Fair share: a normal one's
-- key list, by its `fair_key`. Read by pcall: a read.
local by_list = {[KEYS[2]] = {}}
local lists = {KEYS[2]}
local key_of = {}  -- Fair share: key list -> its fairness key
if KEYS[5] then
    for _, job_id in ipairs(due) do
        local priority, fair_key
        if ring then
            local fields = redis.pcall('HMGET', ARGV[2] .. job_id, 'priority', 'fair_key')
            if type(fields) == 'table' and not fields.err then
                priority, fair_key = fields[1], fields[2]
            end
        else
            priority = redis.pcall('HGET', ARGV[2] .. job_id, 'priority')
        end
        local list = level_list(type(priority) == 'string' and priority or nil, KEYS[2], KEYS[4],
            KEYS[5])
        local keyed = list == KEYS[2] and fair_home(ring, fair_key)
        if keyed then
            if not key_of[keyed] then
                local wrong = fair_home_refusal(ring, keyed)
                if wrong then
                    return wrong
                end
                key_of[keyed] = fair_key
            end
            list = keyed
        end
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
        if key_of[list] then
            local ids = by_list[list]
            fair_joined(ring, key_of[list], redis.call('RPUSH', list, unpack(ids)), #ids,
                string.format('%d', now))
        else
            redis.call('RPUSH', list, unpack(by_list[list]))
        end
        if list ~= KEYS[2] then
            woken = woken + #by_list[list]
        end
    end
end
wake_idle(KEYS[2], woken)
redis.call('ZADD', KEYS[3], unpack(arrivals))
return #due
