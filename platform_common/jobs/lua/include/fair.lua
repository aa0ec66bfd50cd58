-- Fair share (queue/limits.py fair_by; the layout in keys.py): while a type's limits name
-- a fairness key (the payload's tenant, orchestrator_id or session_id), each job enqueued
-- with that field waits on its key's list, `<ring>:q:<key>`, and the ring (a list) holds
-- each key with jobs waiting once, plus FAIR_SHARED, the turn of the queue list itself
-- (jobs without the field). The claim serves the ring round robin, one job a turn: it
-- takes the next entry at the ring's right, and puts the entries it served back at the
-- left. A job the claim starts from a key's list keeps its key in its job hash
-- (`fair_key`), so it goes back on that list when it is released, retried, recovered
-- from a dead worker or requeued from the dead letters (include/fair_lists.lua); a
-- scheduled job gets its `fair_key` at the enqueue, and its promotion puts it on its
-- key's list.

-- @include fair_lists
local FAIR_FIELDS = {tenant = 1, orchestrator_id = 2, session_id = 3}
-- Ring entries one take may pass over without a job (a key at its max_running_per_key,
-- or whose list holds none), beyond one per slot: bounded, so 10,000 capped keys cost a
-- take no more than this many looks; the ones passed go to the back, and the next take
-- looks further on.
local FAIR_MAX_PASSES = 64
local FAIR_RUNNING_TTL_MS = 86400000  -- keys.py: a key's running set, a day after a start

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

-- Enqueue: `ids_by_key` ({key = {ids...}}, `order` its keys in the order first met) go
-- on their keys' lists (include/fair_lists.lua fair_joined). Writes only: the caller
-- checked each list's type.
local function fair_push(ring, ids_by_key, order)
    for _, key in ipairs(order) do
        local ids = ids_by_key[key]
        fair_joined(ring, key, redis.call('LPUSH', ring .. ':q:' .. key, unpack(ids)), #ids)
    end
end

-- Claim: the plan of a take of up to `want` jobs of the normal level, round robin over
-- the ring `ring` (of `ring_len` entries). `shared_next()` gives the queue list's next
-- job (or nil); `cap` is max_running_per_key (or nil), `leases` the leases zset. Reads
-- only. Returns the plan, {picks = {{job id, entry}...} in turn order, ...} for
-- fair_commit, or nil and the refusal of a key of another type.
local function fair_plan(ring, ring_len, want, shared_next, cap, leases)
    local plan = {picks = {}, entries = {}, visits = {}, state = {}, passed = 0,
        capped = 0, ring = ring, ring_len = ring_len, cap = cap}
    local entries, state = plan.entries, plan.state
    local read = 0  -- ring entries read (from the right)
    local function read_ring()
        if read >= ring_len then
            return false
        end
        local chunk = redis.pcall('LRANGE', ring, -(read + want), -(read + 1))
        if failed(chunk) or #chunk == 0 then
            return false
        end
        for i = #chunk, 1, -1 do
            entries[#entries + 1] = chunk[i]
        end
        read = read + #chunk
        return true
    end
    -- A key's state on its first turn: its list, the window read so far (rightmost
    -- first) and, with a cap, the room left (its running set's members still leased).
    local function state_of(entry)
        local s = state[entry]
        if s then
            return s
        end
        s = {window = {}, used = 0, ended = false, room = nil, stale = nil}
        state[entry] = s
        if entry == FAIR_SHARED then
            return s
        end
        s.list = ring .. ':q:' .. entry
        local refusal = fair_wrong_type(s.list, 'list')
        if refusal then
            return nil, refusal
        end
        if cap then
            s.running = ring .. ':r:' .. entry
            local members = redis.pcall('ZRANGE', s.running, 0, -1)
            if failed(members) then
                return nil, fair_wrong_type(s.running, 'zset') or members
            end
            local live = 0
            s.stale = {}
            if #members > 0 then
                local scores = redis.call('ZMSCORE', leases, unpack(members))
                for m, member in ipairs(members) do
                    if scores[m] then
                        live = live + 1
                    else
                        s.stale[#s.stale + 1] = member
                    end
                end
            end
            s.room = cap - live
        end
        return s
    end
    -- The next job of a key's list (read `want` at a time from the right, and one more:
    -- a take of a list's last jobs then knows it emptied it, and the key leaves the ring.
    -- A key left in the ring with its list empty would be pushed into it a second time by
    -- the next job to arrive on that list, fair_joined, and get two turns a round), or
    -- nil.
    local function key_next(s)
        if s.used == #s.window then
            if s.ended then
                return nil
            end
            local chunk = redis.call('LRANGE', s.list, -(#s.window + want + 1), -(#s.window + 1))
            for i = #chunk, 1, -1 do
                s.window[#s.window + 1] = chunk[i]
            end
            s.ended = #chunk <= want
            if s.used == #s.window then
                return nil
            end
        end
        s.used = s.used + 1
        return s.window[s.used]
    end
    local at, yielded = 0, false
    while #plan.picks < want do
        at = at + 1
        if at > #entries and not read_ring() then
            -- The whole ring is read: round again, while the last round served someone.
            if #entries == 0 or not yielded then
                break
            end
            at, yielded = 1, false
        end
        local entry = entries[at]
        local s, refusal = state_of(entry)
        if not s then
            return nil, refusal
        end
        local job = nil
        if entry == FAIR_SHARED then
            job = shared_next()
        elseif s.room and s.room <= 0 then
            if s.used < #s.window or not s.ended then
                plan.capped = plan.capped + 1  -- a key with jobs, held at its cap
            end
        else
            job = key_next(s)
            if job and s.room then
                s.room = s.room - 1
            end
        end
        plan.visits[#plan.visits + 1] = at
        if job then
            plan.picks[#plan.picks + 1] = {job, entry, #plan.visits}
            yielded = true
        else
            plan.passed = plan.passed + 1
            if plan.passed > FAIR_MAX_PASSES + want then
                break
            end
        end
    end
    return plan
end

-- The entries of `window` (a list's, rightmost first, wake markers among them) up to its
-- k-th job, markers before it included: what a take of k jobs moves or drops.
local function window_upto(window, k)
    local out, jobs = {}, 0
    for _, entry in ipairs(window) do
        if jobs == k then
            break
        end
        out[#out + 1] = entry
        if entry ~= WAKE_MARKER then
            jobs = jobs + 1
        end
    end
    return out
end

-- The take's windows and the ring's next order once `kept` of the plan's picks start (the
-- limits may start fewer than planned): the windows ({list, entries} as the claim moves
-- them) are appended to `windows`; returns {job id -> entry} of the kept picks taken
-- from a key's list, and the ring's writes as a function to call with the other writes.
local function fair_commit(plan, kept, windows, queue, shared_window)
    local taken = {}
    local last_visit = #plan.visits
    for p = 1, kept do
        local pick = plan.picks[p]
        taken[pick[2]] = (taken[pick[2]] or 0) + 1
        last_visit = pick[3]
    end
    local by_job = {}
    for p = 1, kept do
        if plan.picks[p][2] ~= FAIR_SHARED then
            by_job[plan.picks[p][1]] = plan.picks[p][2]
        end
    end
    local shared = taken[FAIR_SHARED] or 0
    if shared > 0 then
        windows[#windows + 1] = {queue, window_upto(shared_window, shared)}
    end
    -- Each entry served or passed goes to the back in turn order, the one after the last
    -- served first; a key whose whole list is taken leaves the ring.
    local last, top = plan.visits[last_visit] or 0, 0
    for v = 1, last_visit do
        top = math.max(top, plan.visits[v])
    end
    local order, emptied = {}, {}
    for e = last + 1, top do
        order[#order + 1] = plan.entries[e]
    end
    for e = 1, last do
        order[#order + 1] = plan.entries[e]
    end
    for entry, s in pairs(plan.state) do
        local count = taken[entry] or 0
        if entry ~= FAIR_SHARED then
            if count > 0 then
                local moved = {}
                for i = 1, count do
                    moved[i] = s.window[i]
                end
                windows[#windows + 1] = {s.list, moved}
            end
            -- (A key read to its list's end, all of it taken: its list is empty now.)
            emptied[entry] = s.ended and count == #s.window
        end
    end
    local function write()
        for _, s in pairs(plan.state) do
            if s.stale and #s.stale > 0 then
                redis.call('ZREM', s.running, unpack(s.stale))
            end
        end
        if top > 0 then
            redis.call('LTRIM', plan.ring, 0, -(top + 1))
            local pushed = {}
            for _, entry in ipairs(order) do
                if not emptied[entry] and not pushed[entry] then
                    pushed[entry] = true
                    redis.call('LPUSH', plan.ring, entry)
                end
            end
        end
        -- The queue list's turn alone left: the ring is done (plain FIFO again).
        if redis.call('LLEN', plan.ring) == 1 and redis.call('LINDEX', plan.ring, 0) == FAIR_SHARED then
            redis.call('DEL', plan.ring)
        end
    end
    return by_job, write
end

-- After the claim's writes: the jobs started from a key's list (`started`, {job id ->
-- key}) join that key's running set, while a cap is set.
local function fair_running(plan, started, now_text)
    if not plan.cap then
        return
    end
    local by_key = {}
    for job_id, entry in pairs(started) do
        by_key[entry] = by_key[entry] or {}
        local members = by_key[entry]
        members[#members + 1] = now_text
        members[#members + 1] = job_id
    end
    for entry, members in pairs(by_key) do
        local key = plan.state[entry].running
        redis.call('ZADD', key, unpack(members))
        redis.call('PEXPIRE', key, FAIR_RUNNING_TTL_MS)
    end
end
