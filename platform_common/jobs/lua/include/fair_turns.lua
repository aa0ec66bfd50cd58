-- Fair share's turns, as the claim takes them (include/fair_keys.lua says how jobs wait):
-- the ring is served round robin, one job a turn, or `w` jobs in a row for a key of
-- weight w (the limits hash's field `weight:<key>`, 1 to FAIR_MAX_WEIGHT; queue/limits.py).
-- @include fair_keys

-- Ring entries one take may pass over without a job (a key at its max_running_per_key,
-- or whose list holds none), beyond one per slot: bounded, so 10,000 capped keys cost a
-- take no more than this many looks; the ones passed go to the back, and the next take
-- looks further on.
local FAIR_MAX_PASSES = 64
local FAIR_RUNNING_TTL_MS = 86400000  -- keys.py: a key's running set, a day after a start
local FAIR_MAX_WEIGHT = 1000  -- queue/limits.py MAX_KEY_WEIGHT

-- Claim: the plan of a take of up to `want` jobs of the normal level, round robin over
-- the ring `ring` (of `ring_len` entries). `shared_next()` gives the queue list's next
-- job (or nil); `cap` is max_running_per_key (or nil), `leases` the leases zset;
-- `weights`, when the limits hold any (their count), the position in KEYS of the limits
-- hash, whose `weight:<key>` field each key's first turn reads. Reads only. Returns the
-- plan, {picks = {{job id, entry}...} in turn order, ...} for fair_commit, or nil and the
-- refusal of a key of another type or of a weight that does not parse.
local function fair_plan(ring, ring_len, want, shared_next, cap, leases, weights)
    local plan = {picks = {}, entries = {}, visits = {}, state = {}, passed = 0,
        capped = 0, ring = ring, ring_len = ring_len, cap = cap, since = ring .. ':since'}
    local refusal = named_wrong_type(plan.since, 'hash')
    if refusal then
        return nil, refusal
    end
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
        s.list = ring .. ':q:' .. entry  -- (its type checked by its first read, key_next)
        if weights then
            local raw = redis.call('HGET', KEYS[weights], 'weight:' .. entry)
            if raw then
                local w = int(raw)
                if not w or w < 1 or w > FAIR_MAX_WEIGHT or not string.find(raw, '^[1-9]') then
                    return nil, corrupt(weights, 'field weight:' .. entry
                        .. ' is not a whole number from 1 to ' .. FAIR_MAX_WEIGHT .. ': ' .. shown(raw))
                end
                s.weight = w
            end
        end
        if cap then
            s.running = ring .. ':r:' .. entry
            local members = redis.pcall('ZRANGE', s.running, 0, -1)
            if failed(members) then
                return nil, named_wrong_type(s.running, 'zset') or members
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
    -- The next job of a key's list, or nil (and the refusal of a list of another type).
    -- Read from the right a window at a time: the first as long as this key's share of
    -- the take (one job a key when the ring is longer than the take: each LRANGE reply
    -- costs the script a table), the next ones `want` long; each one id longer, which
    -- tells whether the list ends within it (then the take knows whether it empties
    -- the list without another command).
    local first = math.max(1, math.ceil(want / ring_len))
    local function key_next(s)
        if s.used == #s.window then
            if s.ended then
                return nil
            end
            local size = #s.window == 0 and first or want
            local chunk = redis.pcall('LRANGE', s.list, -(#s.window + size + 1), -(#s.window + 1))
            if failed(chunk) then
                return nil, named_wrong_type(s.list, 'list') or chunk
            end
            for i = #chunk, 1, -1 do
                s.window[#s.window + 1] = chunk[i]
            end
            s.ended = #chunk <= size
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
        plan.visits[#plan.visits + 1] = at
        local visit, served = #plan.visits, 0
        if entry == FAIR_SHARED then
            local job = shared_next()
            if job then
                plan.picks[#plan.picks + 1] = {job, entry, visit}
                served = 1
            end
        else
            -- A key's turn: up to its weight of jobs in a row, within its cap's room.
            for _ = 1, s.weight or 1 do
                if #plan.picks >= want then
                    break
                end
                if s.room and s.room <= 0 then
                    if served == 0 and (s.used < #s.window or not s.ended) then
                        plan.capped = plan.capped + 1  -- a key with jobs, held at its cap
                    end
                    break
                end
                local job
                job, refusal = key_next(s)
                if refusal then
                    return nil, refusal
                end
                if not job then
                    break
                end
                if s.room then
                    s.room = s.room - 1
                end
                plan.picks[#plan.picks + 1] = {job, entry, visit}
                served = served + 1
            end
        end
        if served > 0 then
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
    local taken, by_job = {}, {}
    local last_visit = #plan.visits
    for p = 1, kept do
        local pick = plan.picks[p]
        taken[pick[2]] = (taken[pick[2]] or 0) + 1
        last_visit = pick[3]
        if pick[2] ~= FAIR_SHARED then
            by_job[pick[1]] = pick[2]
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
                windows[#windows + 1] = {s.list, {unpack(s.window, 1, count)}}
            end
            -- A key read to its list's end, all of it taken: its list is empty now; one
            -- whose whole window is taken but not known to end is looked at after the
            -- take (`unsure`, by LLEN: a window is as short as the key's share).
            if count == #s.window then
                emptied[entry] = s.ended or 'unsure'
            end
        end
    end
    -- `now_text`: the keys served wait from now on, in the ring's `since` hash (keys.py),
    -- where the ones that leave the ring are deleted.
    local function write(now_text)
        for _, s in pairs(plan.state) do
            if s.stale and #s.stale > 0 then
                redis.call('ZREM', s.running, unpack(s.stale))
            end
        end
        if top > 0 then
            redis.call('LTRIM', plan.ring, 0, -(top + 1))
            local pushed, back, served, left = {}, {}, {}, {}
            for _, entry in ipairs(order) do
                local gone = emptied[entry]
                if gone == 'unsure' then
                    gone = redis.call('LLEN', plan.state[entry].list) == 0
                end
                if gone then
                    left[#left + 1] = entry
                elseif not pushed[entry] then
                    pushed[entry] = true
                    back[#back + 1] = entry
                    if taken[entry] and entry ~= FAIR_SHARED then
                        served[#served + 1] = entry
                        served[#served + 1] = now_text
                    end
                end
            end
            if #back > 0 then  -- (LPUSH a b c: a nearest the right, served first)
                redis.call('LPUSH', plan.ring, unpack(back))
            end
            if #served > 0 then
                redis.call('HSET', plan.since, unpack(served))
            end
            if #left > 0 then
                redis.call('HDEL', plan.since, unpack(left))
            end
        end
        -- The queue list's turn alone left: the ring is done (plain FIFO again).
        if redis.call('LLEN', plan.ring) == 1 and redis.call('LINDEX', plan.ring, 0) == FAIR_SHARED then
            redis.call('DEL', plan.ring, plan.since)
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
