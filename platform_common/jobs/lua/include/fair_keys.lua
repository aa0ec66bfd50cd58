-- Fair share (queue/limits.py fair_by; the layout in keys.py): while a type's limits name
-- a fairness key (the payload's tenant, orchestrator_id or session_id), each job enqueued
-- with that field waits on its key's list, `<ring>:q:<key>`, and the ring (a list) holds
-- each key with jobs waiting once, plus FAIR_SHARED, the turn of the queue list itself
-- (jobs without the field). The claim serves the ring round robin, one job a turn: it
-- takes the next entry at the ring's right, and puts the entries it served back at the
-- left. A job the claim starts from a key's list keeps its key in its job hash
-- (`fair_key`), so it goes back on that list when it is released, retried, recovered
-- from a dead worker or requeued from the dead letters (fair_home, fair_joined); a
-- scheduled job gets its `fair_key` at the enqueue, and its promotion puts it on its
-- key's list.

local FAIR_SHARED = ''  -- keys.py FAIR_SHARED_ENTRY: no fairness key is empty
local FAIR_FIELDS = {tenant = 1, orchestrator_id = 2, session_id = 3}

-- The fairness key of each of n jobs, by the field `by` (FAIR_FIELDS), from `blob`: per
-- job the values of tenant, orchestrator_id and session_id, each written
-- "<length in bytes>:<value>" (length 0: the job has none), as queue/producer.py sends
-- them. Returns {[i] = key} for the jobs that have one, or nil and an error text.
local function fair_keys_of(blob, n, by)
    local keys, at = {}, 1
    for i = 1, n do
        for field = 1, 3 do
            local colon = string.find(blob, ':', at, true)
            local length = colon and colon - at <= 6 and tonumber(string.sub(blob, at, colon - 1))
            if not length or colon + length > #blob + 1 then
                return nil, 'the fairness values of job ' .. i .. ' do not parse'
            end
            if field == by and length > 0 then
                keys[i] = string.sub(blob, colon + 1, colon + length)
            end
            at = colon + length + 1
        end
    end
    return keys
end

-- The keys of `order` whose lists are empty (they join the ring), or nil and the
-- refusal of a list or of the ring's `since` hash (keys.py) holding another type. Reads.
local function fair_joining(ring, order)
    local joining = {}
    for _, key in ipairs(order) do
        local length = redis.pcall('LLEN', ring .. ':q:' .. key)
        if failed(length) then
            return nil, named_wrong_type(ring .. ':q:' .. key, 'list') or length
        end
        joining[key] = length == 0
    end
    if next(order) then
        local refusal = named_wrong_type(ring .. ':since', 'hash')
        if refusal then
            return nil, refusal
        end
    end
    return joining
end

-- The refusal of the key list `keyed` (fair_home) or of the ring's `since` hash holding
-- another type, or nil: what a script that puts a job back on its key's list checks
-- before its first write.
local function fair_home_refusal(ring, keyed)
    return named_wrong_type(keyed, 'list') or named_wrong_type(ring .. ':since', 'hash')
end

-- After `pushed` ids went onto key `key`'s list (LPUSH at the back, as an enqueue; RPUSH at
-- the consuming end, for a job that waited its turn already), `length` the push's reply:
-- the key joins the ring if its list was empty (and the ring, empty, gets the queue
-- list's turn first), and waits from `now_text` in the ring's `since` hash. The caller
-- pushes (each script names only the commands it calls: its ACL rules are derived from
-- them, acl.py) after checking the list's type and the since hash's
-- (fair_home_refusal, fair_joining).
local function fair_joined(ring, key, length, pushed, now_text)
    if length == pushed then
        if redis.call('LLEN', ring) == 0 then
            redis.call('LPUSH', ring, FAIR_SHARED)
        end
        redis.call('LPUSH', ring, key)
        redis.call('HSET', ring .. ':since', key, now_text)
    end
end

-- Enqueue: `ids_by_key` ({key = {ids...}}, `order` its keys in the order first met) go
-- on their keys' lists (fair_joined). Writes only: the caller checked each list's type
-- and the since hash's (fair_joining).
local function fair_push(ring, ids_by_key, order, now_text)
    for _, key in ipairs(order) do
        local ids = ids_by_key[key]
        fair_joined(ring, key, redis.call('LPUSH', ring .. ':q:' .. key, unpack(ids)), #ids,
            now_text)
    end
end

-- Back on the queue (queue_fail, queue_promote, queue_dead_requeue): the key list a job
-- of job-hash `fair_key` (a string, or nil/false: none) goes back to, when the caller
-- passed the ring `ring`; nil for the queue list (no ring, no key). The empty key is
-- FAIR_SHARED's, never a fairness key's: none. A job of priority high or low goes to its
-- level's list whatever its key: the caller asks only for a normal one.
local function fair_home(ring, fair_key)
    if ring and type(fair_key) == 'string' and fair_key ~= FAIR_SHARED then
        return ring .. ':q:' .. fair_key
    end
    return nil
end
