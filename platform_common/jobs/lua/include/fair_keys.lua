-- Fair share (queue/limits.py fair_by; the layout in keys.py): while a type's limits name
-- a fairness key (the payload's tenant, orchestrator_id or session_id), each job enqueued
-- with that field waits on its key's list, `<ring>:q:<key>`, and the ring (a list) holds
-- each key with jobs waiting once, plus FAIR_SHARED, the turn of the queue list itself
-- (jobs without the field, retries, scheduled and requeued jobs). The claim serves the
-- ring round robin, one job a turn: it takes the next entry at the ring's right, and puts
-- the entries it served back at the left.

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

-- The refusal of a key a fair script derives (in no KEYS: "CORRUPT 0 <key> <problem>")
-- that holds another type than `kind`, else nil (a missing key is none).
local function fair_wrong_type(key, kind)
    local found = redis.call('TYPE', key).ok
    if found ~= kind and found ~= 'none' then
        return redis.error_reply('CORRUPT 0 ' .. key .. ' holds a ' .. found
            .. ', where the queue keeps a ' .. kind)
    end
    return nil
end

-- The keys of `order` whose lists are empty (they join the ring), or nil and the
-- refusal of a list or of the ring's `since` hash (keys.py) holding another type. Reads.
local function fair_joining(ring, order)
    local joining = {}
    for _, key in ipairs(order) do
        local length = redis.pcall('LLEN', ring .. ':q:' .. key)
        if failed(length) then
            return nil, fair_wrong_type(ring .. ':q:' .. key, 'list') or length
        end
        joining[key] = length == 0
    end
    if next(order) then
        local refusal = fair_wrong_type(ring .. ':since', 'hash')
        if refusal then
            return nil, refusal
        end
    end
    return joining
end

-- Enqueue: `ids_by_key` ({key = {ids...}}, `order` its keys in the order first met) go
-- on their keys' lists; a key whose list was empty (`joining`, fair_joining) joins the
-- ring (and the ring, empty, gets the queue list's turn first), and its time in the
-- `since` hash is `now_text` (it waits from now). Writes only.
local function fair_push(ring, ids_by_key, order, joining, now_text)
    local since = {}
    for _, key in ipairs(order) do
        redis.call('LPUSH', ring .. ':q:' .. key, unpack(ids_by_key[key]))
        if joining[key] then
            if redis.call('LLEN', ring) == 0 then
                redis.call('LPUSH', ring, FAIR_SHARED)
            end
            redis.call('LPUSH', ring, key)
            since[#since + 1] = key
            since[#since + 1] = now_text
        end
    end
    if #since > 0 then
        redis.call('HSET', ring .. ':since', unpack(since))
    end
end
