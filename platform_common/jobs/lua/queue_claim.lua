-- Claim jobs: start an attempt under a lease, or expire a job past its TTL without
-- starting it. The jobs are given (moved into the processing list by the worker's
-- BLMOVE when the queue was empty) or taken here, off the queue list, when the worker
-- knows it holds jobs: then the take and the claim are one call, one round trip.
-- KEYS[1] processing list   KEYS[2] leases zset   KEYS[3] stats hash   KEYS[4] expiry zset
-- KEYS[5] queue list   KEYS[6] waiting zset
-- KEYS[7] queued hash   KEYS[8] arrivals zset   KEYS[9] arrived hash
-- KEYS[10] the type's paused key (a string; see "Paused" below)
-- ARGV[1] lease ms   ARGV[2] worker id   ARGV[3] completion channel
-- ARGV[4] the arrival bucket width (ms)   ARGV[5] take: how many jobs to take (0: given)
-- Given (take 0):
--   KEYS[9+2i] job hash of job i, KEYS[10+2i] result key of job i
--   ARGV[4+2i] job id of job i, ARGV[5+2i] the lease token the worker chose for it
-- Taken (take > 0): up to `take` jobs off the right of the queue list, moved into
-- processing as LMOVE RIGHT LEFT would (the reaper sees them as it sees the worker's).
--   KEYS[11] this call's marker hash (see below)   KEYS[12] the worker's previous one
--   ARGV[6] job key prefix, ARGV[7] result key prefix (the key of job id x: prefix .. x;
--   such keys are in no KEYS, so each is read before the first write: a cluster node
--   that does not serve one refuses there, before anything is written)
--   ARGV[7+i] the token for the i-th job taken
--   The marker (field `ids`: the ids taken, in order, one per line) makes the call safe
--   to send again: a replay whose first run took jobs takes none, writes nothing and
--   hands back each job still held with its token. It expires after a lease; the
--   worker's next take deletes its previous one (so one is kept per worker).
-- Levels (queue/priority.py), optional: the two KEYS after all the above are the high
--   and low lists (then the limits' two, below); without them the claim takes from the
--   queue list alone. With them:
--   - a take fills its slots from the highest level with jobs waiting (high, normal, low),
--     except its fair turns: the job numbered k (the type's `started` count before the
--     call, plus its slot) comes from the lowest level with jobs waiting when
--     k % 10 == 0, and from the level below the highest one with jobs waiting when
--     k % 10 == 5 (queue/priority.py FAIR_TURN);
--   - given jobs (take 0) while a high or low job waits are put back as a pause puts them
--     back, and the reply is {"levels"} alone: the worker takes (take > 0) at once.
--   A wake marker (keys.py WAKE_MARKER, pushed by a high or low enqueue to wake an idle
--   worker) met on the queue list or given is dropped, never claimed; a take that leaves
--   high or low jobs waiting pushes one if the queue list is left empty (include/levels:
--   the next idle worker wakes).
-- A job still packed in the queued hash (queue/envelope.py: enqueued, never claimed) is
-- unpacked into its job hash here, and leaves the queued hash and its arrival second;
-- any other job (a retry, a released or requeued one, one of the previous layout)
-- already has its job hash and waits in the waiting zset.
-- Returns {queue length left, entry per job...}, so the worker knows whether to take
-- more without blocking; an entry is
--   {job_id, "run", token, attempts, max_attempts, expires_at, payload, now, trace_context}
--       (trace_context: the producer's, or nil when the record holds none). Payload and
--       trace context are returned as stored, unchecked: the worker reads this reply
--       undecoded and decodes each itself (queue/leases.py), so a payload that is not
--       UTF-8 is held as a corrupt claim there (a scan of every byte here would cost
--       about a third of the claim), and a trace context that is not is ignored. (A job
--       past its TTL is expired here unread, whatever its payload holds.)
--   {job_id, "corrupt", token, problem, now}: a numeric field of the record does not
--       parse. The job is held as a run is (running, under a lease, counted started),
--       so the worker can end it with the problem (queue_fail mode "corrupt").
--   {job_id, "expired", trace_context}: past its TTL, expired here without starting
--       (trace_context as for a run: the worker logs the expiry under the producer's
--       trace), or {job_id, "skip"} (unknown, finished or someone else's)
-- `now` is Redis TIME in ms: the worker times the attempt's deadlines from it, never
-- from its own clock.
-- Paused: while the paused key exists (JobQueue.pause) no job is started, expired or
-- taken: the reply is {"paused"}. Given jobs go back to the queue list's consuming end,
-- as if the BLMOVE had not run (in reverse order, so the first taken is taken first
-- again); nothing else is written. A replay of a take whose first run took jobs still
-- hands them back (they are running, under lease).
-- Limits (lua/include/limits.lua; queue/limits.py), optional: the two KEYS after the
-- levels' are the type's limits hash and its rate key (after the jobs' keys, so the
-- positions above do not move; a caller passing neither applies no limits). With jobs
-- to start, the claim reads the limits hash (one HMGET: absent, nothing else is read)
-- and starts at most as many as the limits allow now, the first in the take's order
-- (given jobs past them go back to the queue list); when none may start the reply is
-- {"capped"} (max_running jobs of the type run) or {"throttled", ms} (the rate allows
-- the next start in ms), and it writes nothing but what a pause writes and the count of
-- the jobs held back (the stats hash's held_back_rate or held_back_max_running, checked
-- before). A replay of a take hands back what its first run took.
-- Fair share (lua/include/fair_turns.lua; queue/limits.py fair_by), optional: the KEYS
-- after the limits' two is the type's ring (keys.py `fair`), read once the stats field
-- `fair_keyed` (jobs ever enqueued on a fairness key's list) is above 0. While it holds
-- entries, the normal level's jobs come from it round robin, one job a turn: a key's
-- next job from its list, the queue list's next on its shared turn; high and low jobs
-- are taken by level as ever, before (and, on the fair turns, after) the ring's.
-- max_running_per_key (the limits hash) skips a key whose running set holds that many
-- leased jobs; a take that finds only such keys (and nothing else waiting) starts none
-- and replies {"capped"}, its passes counted in held_back_max_running_per_key. Given
-- jobs while the ring holds entries go back as for Levels ({"levels"}: the worker takes).
-- A job started from a key's list gets the key into its job hash's `fair_key` (its
-- release, retries, recovery and requeue put it back on that list:
-- include/fair_keys.lua).
-- All-or-nothing: a shared key of another type, a job key that is not a hash, or a
-- `started`/`expired` counter of the stats hash (or an `arrived` count) that is not an
-- integer in Redis' own text (HINCRBY refuses "007" and "-0" too) is refused with
-- the error reply "CORRUPT <position in KEYS> <problem>" before the first write (then no
-- job of the call is claimed: given ones stay in the processing list, where the reaper
-- finds them; none is taken); a job key taken here, in no KEYS, is named instead:
-- "CORRUPT 0 <key> <problem>". A field of one record that does not parse is no refusal:
-- that job is held as "corrupt" above. Nothing after the first write can fail.
-- @include time
-- @include numbers
-- @include key_types
-- @include arrivals
-- @include packed_header
-- @include levels
-- @include limits
-- @include fair_turns
local now = now_ms()
-- Written as text, formatted once: Redis formats each number argument of a command
-- with printf, which costs more than the rest of some commands.
local now_text = string.format('%d', now)
local lease_ms = tonumber(ARGV[1])
local lease_until = string.format('%d', now + lease_ms)
local arrival_ms = tonumber(ARGV[4])
local take = tonumber(ARGV[5])
local out = {0}
local started = 0
local expired = 0
-- Jobs that no longer wait (BLMOVE took them off the queue list): out of the waiting set.
local arrived = {}

-- Why the record cannot run (its first numeric field that does not parse), or nil.
-- f: state, token, expires_at, ttl, attempts, max_attempts, payload, trace_context
local function problem_of(f)
    local field, raw
    if not int(f[3]) then
        field, raw = 'expires_at', f[3]
    elseif not (int(f[4]) and int(f[4]) > 0 and string.find(f[4], '^[1-9]')) then
        -- (a leading zero, "060", is refused too: SET EX refuses it as stored, so the
        -- job's completion could not record it)
        field, raw = 'ttl', f[4]
    elseif f[5] and not int(f[5]) then
        field, raw = 'attempts', f[5]
    elseif not (int(f[6]) and int(f[6]) > 0) then
        field, raw = 'max_attempts', f[6]
    else
        return nil
    end
    return 'stored field ' .. field .. ' of the job does not parse: ' .. shown(raw)
end

-- The entry of a job as a replay of its claim finds it: still held with `token` (the
-- claim's reply was lost, the call came again), or not (someone else's now: skipped).
local function replayed(job_id, token, f)
    if f[1] ~= 'running' or f[2] ~= token then
        return {job_id, 'skip'}
    end
    local problem = problem_of(f)
    if problem then
        return {job_id, 'corrupt', token, problem, now}
    end
    return {job_id, 'run', token, f[5], f[6], f[3], f[7], now, f[8] or false}
end

-- The checks, all reads and cheap: a TYPE per key the writes below touch; the queue
-- list's length (for the reply, and the take), the counters and the pause are read
-- once, each read doubling as the type check.
local typed = {{1, 'list'}, {2, 'zset'}, {4, 'zset'}, {6, 'zset'}, {8, 'zset'}}
if take > 0 then
    typed[#typed + 1] = {11, 'hash'}
    typed[#typed + 1] = {12, 'hash'}
end
local refusal = wrong_types(typed)
if refusal then
    return refusal
end
local left = redis.pcall('LLEN', KEYS[5])
if failed(left) then
    return wrong_type(5, 'list') or left
end
-- (`leveled`, `fair_keyed`: jobs ever enqueued at priority high or low, on a fairness
-- key's list; see Levels and Fair share below)
local counters = redis.pcall('HMGET', KEYS[3], 'started', 'expired', 'leveled', 'fair_keyed')
refusal = counts_refusal(3, {'started', 'expired'}, counters)
if refusal then
    return refusal
end
-- (any string value pauses)
local paused = redis.pcall('GET', KEYS[10])
if failed(paused) then
    return wrong_type(10, 'string') or paused
end
-- Levels: the lengths of the high and low lists, when passed, read only once `leveled`
-- is above 0: a type that uses only normal pays no command for them.
local fixed_keys = take > 0 and 12 or 10 + (#ARGV - 5)
local levels = nil  -- {{key, length} of high, of normal, of low}
local level_waiting = 0
if #KEYS >= fixed_keys + 2 and counters[3] and counters[3] ~= '0' then
    levels = {}
    for l, at in ipairs({fixed_keys + 1, 5, fixed_keys + 2}) do
        local length = left
        if at ~= 5 then
            length = redis.pcall('LLEN', KEYS[at])
            if failed(length) then
                return wrong_type(at, 'list') or length
            end
            level_waiting = level_waiting + length
        end
        levels[l] = {KEYS[at], length}
    end
end
-- Fair share: the ring's length, read once `fair_keyed` is above 0, and then the limits
-- too, for max_running_per_key (else the limits check below reads them).
local limits_index, rate_index, ring_index = fixed_keys + 3, fixed_keys + 4, fixed_keys + 5
local limits, limits_read = nil, false
local ring_len = 0
if #KEYS >= ring_index and counters[4] and counters[4] ~= '0' then
    ring_len = redis.pcall('LLEN', KEYS[ring_index])
    if failed(ring_len) then
        return wrong_type(ring_index, 'list') or ring_len
    end
    if ring_len > 0 then
        local refusal
        limits, refusal = read_limits(limits_index)
        if refusal then
            return refusal
        end
        limits_read = true
        if not levels then  -- (no high or low job ever: their lists are not read)
            levels = {{KEYS[fixed_keys + 1], 0}, {KEYS[5], left}, {KEYS[fixed_keys + 2], 0}}
        end
    end
end
local fair = ring_len > 0
local fair_state = nil  -- the take's plan (include/fair_turns.lua fair_plan)
local queue_window = nil  -- the queue list's window, for the ring's shared turns
local slot_level = {}  -- the level each slot of a take was filled from
-- The jobs of this call: given (moved by the worker's BLMOVE), or the oldest `take` of
-- the queue list, read here and moved below, after the checks.
local ids, tokens, job_keys, result_keys = {}, {}, {}, {}
local given_at = take == 0 and {} or nil  -- job i's position in KEYS, when given
local markers = 0     -- wake markers given: dropped from processing
-- Taken: {list, entries tail first} per list taken from, when levels or wake markers
-- are met; nil for the usual take, the oldest `take` of the queue list (moved by as
-- many LMOVEs).
local windows = nil
-- The refusal of job i's key: by its position in KEYS when given, else by its name
-- ("CORRUPT 0 <key> <problem>": a key taken here is in no KEYS).
local function job_refusal(i)
    if take == 0 then
        return wrong_type(given_at[i], 'hash')
    end
    return named_wrong_type(job_keys[i], 'hash')
end
if take == 0 then
    for i = 1, (#ARGV - 5) / 2 do
        if ARGV[4 + 2 * i] == WAKE_MARKER then
            markers = markers + 1
        else
            local k = #ids + 1
            ids[k], tokens[k] = ARGV[4 + 2 * i], ARGV[5 + 2 * i]
            job_keys[k], result_keys[k], given_at[k] = KEYS[9 + 2 * i], KEYS[10 + 2 * i], 9 + 2 * i
        end
    end
else
    -- A replay of this very call (its reply was lost, the call was sent again): the
    -- jobs it took are in its marker, in the order they were taken.
    local taken = redis.call('HGET', KEYS[11], 'ids')
    if taken then
        for job_id in string.gmatch(taken, '[^\n]+') do
            ids[#ids + 1] = job_id
        end
    elseif not fair and (not levels or level_waiting == 0) then
        local tail = redis.call('LRANGE', KEYS[5], -take, -1)
        local marked = false
        for i = #tail, 1, -1 do
            if tail[i] ~= WAKE_MARKER then
                ids[#ids + 1] = tail[i]  -- the rightmost first: LMOVE RIGHT's order
            else
                marked = true
            end
        end
        if marked then  -- (wake markers among them: each dropped where it stands)
            local entries = {}
            for i = #tail, 1, -1 do
                entries[#entries + 1] = tail[i]
            end
            windows = {{KEYS[5], entries}}
        end
    else
        -- Levels: each waiting level's window off its tail (at most `take` entries), then
        -- slot by slot the level it takes from (see the header) and that level's next
        -- job; a wake marker met on the way is dropped and takes no slot.
        local started_before = tonumber(counters[1] or '0')
        local entries, used = {}, {}
        windows = {}
        for l = 1, 3 do
            -- (Read on past wake markers, a chunk of `take` at a time, until the window
            -- holds `take` jobs or the list ends: markers wait at the queue list's tail.)
            entries[l], used[l] = {}, 0
            local read, jobs = 0, 0
            while jobs < take and read < levels[l][2] do
                local tail = redis.call('LRANGE', levels[l][1], -(read + take), -(read + 1))
                read = read + take
                for i = #tail, 1, -1 do
                    entries[l][#entries[l] + 1] = tail[i]
                    if tail[i] ~= WAKE_MARKER then
                        jobs = jobs + 1
                    end
                end
            end
        end
        -- The next job of `window` after its entry `at`, past any marker (or nil), and
        -- the position of the last entry read.
        local function next_in(window, at)
            while at < #window do
                at = at + 1
                if window[at] ~= WAKE_MARKER then
                    return window[at], at
                end
            end
            return nil, at
        end
        -- The next job of level l.
        local function next_job(l)
            local job
            job, used[l] = next_in(entries[l], used[l])
            return job
        end
        if fair then
            -- Fair share: the normal level's jobs are the ring's picks, in turn order; the
            -- queue list's window serves the ring's shared turns.
            queue_window = entries[2]
            local shared_used = 0
            local function shared_next()
                local job
                job, shared_used = next_in(queue_window, shared_used)
                return job
            end
            local refusal
            fair_state, refusal = fair_plan(KEYS[ring_index], ring_len, take, shared_next,
                limits and limits.max_running_per_key, KEYS[2],
                limits and limits.weights and limits_index)
            if not fair_state then
                return refusal
            end
            entries[2], used[2] = {}, 0
            for p, pick in ipairs(fair_state.picks) do
                entries[2][p] = pick[1]
            end
        end
        local ahead = {}  -- the next job of each level, read ahead
        for l = 1, 3 do
            ahead[l] = next_job(l)
        end
        for slot = 1, take do
            -- The highest level with a job waiting, the next one below it, the lowest.
            local first, second, last = nil, nil, nil
            for l = 1, 3 do
                if ahead[l] then
                    if not first then
                        first = l
                    elseif not second then
                        second = l
                    end
                    last = l
                end
            end
            if not first then
                break
            end
            local turn = (started_before + slot) % 10
            local l = first
            if turn == 0 then
                l = last
            elseif turn == 5 and second then
                l = second
            end
            ids[#ids + 1] = ahead[l]
            slot_level[#ids] = l
            ahead[l] = next_job(l)
        end
        for l = 1, 3 do
            -- What was read ahead and not taken stays: only the entries up to each level's
            -- last job taken (and the markers before it) are moved or dropped below.
            local consumed = used[l]
            if ahead[l] then
                consumed = consumed - 1
            end
            if consumed > 0 and not (fair and l == 2) then  -- (Fair: include/fair_turns.lua's)
                windows[#windows + 1] = {levels[l][1], {unpack(entries[l], 1, consumed)}}
            end
        end
    end
    for i, job_id in ipairs(ids) do
        tokens[i], job_keys[i], result_keys[i] = ARGV[7 + i], ARGV[6] .. job_id, ARGV[7] .. job_id
    end
    if taken then
        -- Nothing is written: each job still held with its token is handed back again.
        out[1] = left + level_waiting
        for i, job_id in ipairs(ids) do
            local f = redis.pcall('HMGET', job_keys[i], 'state', 'token', 'expires_at', 'ttl',
                'attempts', 'max_attempts', 'payload', 'trace_context')
            if failed(f) then
                return job_refusal(i) or f
            end
            out[i + 1] = replayed(job_id, tokens[i], f)
        end
        return out
    end
end
local n = #ids
-- Given jobs (`job_ids`) go back to the queue list's consuming end, as if the BLMOVE had
-- not run (in reverse order, so the first taken is taken first again).
local function put_back(job_ids)
    for i = #job_ids, 1, -1 do
        redis.call('LREM', KEYS[1], 1, job_ids[i])
        redis.call('RPUSH', KEYS[5], job_ids[i])
    end
end
-- The wake markers given leave processing: dropped (it did its work, this worker is
-- awake), or back on the queue list when `back` (it wakes a worker again).
local function drop_markers(back)
    for _ = 1, markers do
        redis.call('LREM', KEYS[1], 1, WAKE_MARKER)
        if back then
            redis.call('RPUSH', KEYS[5], WAKE_MARKER)
        end
    end
end
-- A claim that starts nothing (paused, or held back by a limit): the given jobs and
-- markers go back; a take has moved nothing yet.
local function give_back()
    if take == 0 then
        put_back(ids)
        drop_markers(true)
    end
end
if paused then
    give_back()
    return {'paused'}
end
-- Levels: given jobs while a high or low job waits (or fair share's ring holds entries) go
-- back, and the worker takes.
if take == 0 and (level_waiting > 0 or fair) then
    put_back(ids)
    drop_markers(false)
    return {'levels'}
end
if n == 0 and fair_state then
    -- Fair share: no job to start. The keys passed go to the ring's back (so the next take
    -- looks further on), a key whose list is empty leaves it; when keys with jobs were
    -- passed at their max_running_per_key, the reply is {"capped"} and they are counted.
    if fair_state.capped > 0 then
        local refusal = held_back_counts(3)
        if refusal then
            return refusal
        end
    end
    local _, write = fair_commit(fair_state, 0, {}, KEYS[5], queue_window)
    write(now_text)
    if fair_state.capped > 0 then
        redis.call('HINCRBY', KEYS[3], 'held_back_max_running_per_key', fair_state.capped)
        return {'capped'}
    end
end
if n == 0 then
    -- (Only wake markers were given, or met on the lists' tails: dropped here.)
    drop_markers(false)
    local dropped = 0
    for _, window in ipairs(windows or {}) do
        for _ = 1, #window[2] do
            redis.call('LREM', window[1], -1, WAKE_MARKER)
            dropped = dropped + 1
        end
    end
    out[1] = left + level_waiting - dropped
    return out
end
-- ---- Limits (see the header): reads only, before any write ----------------------------
-- Fewer than n may start: the first that many are claimed (ids are in the order the take
-- chose them, by level and fair turn, or the order they left the list); a take takes
-- only those (each list's window is cut after the last of them it holds).
local spend, bound
local held_count = 0
local held_back = {}  -- given jobs the limits leave waiting (put back with the writes)
if #KEYS >= rate_index then
    local refusal
    if not limits_read then
        limits, refusal = read_limits(limits_index)
        if refusal then
            return refusal
        end
    end
    if limits then
        local allowed, held
        allowed, held, spend, bound = admitted(limits, n, now, 2, rate_index)
        if not allowed then
            return held  -- the refusal of the rate key
        end
        refusal = held_back_counts(3)
        if refusal then
            return refusal
        end
        if allowed == 0 then
            give_back()
            redis.call('HINCRBY', KEYS[3], bound, n)
            return held
        end
        held_count = n - allowed  -- counted with the writes, after every check below
        local kept = {}
        for i = 1, allowed do
            kept[ids[i]] = true
        end
        if take == 0 then
            held_back = {unpack(ids, allowed + 1, n)}
        end
        for i = n, allowed + 1, -1 do
            ids[i], tokens[i], job_keys[i], result_keys[i] = nil, nil, nil, nil
        end
        n = allowed
        if windows then
            -- Each list's window up to the last job kept in it (markers before it are
            -- dropped as ever; what follows stays on its list).
            local cut = {}
            for _, window in ipairs(windows) do
                local last = 0
                for i, entry in ipairs(window[2]) do
                    if kept[entry] then
                        last = i
                    end
                end
                if last > 0 then
                    cut[#cut + 1] = {window[1], {unpack(window[2], 1, last)}}
                end
            end
            windows = cut
        end
    end
end
-- ---- end of the limits check ----------------------------------------------------------
-- Fair share: the windows of the ring's picks that start (the limits may have cut them),
-- and the ring's next order, written with the writes below.
local fair_jobs, fair_write = nil, nil
if fair_state then
    if fair_state.capped > 0 then
        local refusal = held_back_counts(3)
        if refusal then
            return refusal
        end
    end
    local kept = 0
    for i = 1, n do
        if slot_level[i] == 2 then
            kept = kept + 1
        end
    end
    fair_jobs, fair_write = fair_commit(fair_state, kept, windows, KEYS[5], queue_window)
end
local packed = redis.pcall('HMGET', KEYS[7], unpack(ids))
if failed(packed) then
    return wrong_type(7, 'hash') or packed
end
-- The packed jobs, unpacked: {enqueued_at, expires_at, ttl, max_attempts, nonce,
-- trace_context, payload} as strings, `fields` their job hash's, `problem` (or nil) why
-- the job cannot run.
local unpacked = {}
local packed_keys = {}  -- their job keys
local leaving = arrival_tally()  -- the packed jobs leaving the queued hash
local unpacking = {}
for i = 1, n do
    local value = packed[i]
    if value and not unpacking[ids[i]] then
        unpacking[ids[i]] = true
        -- (enq, of a value that does not parse: it still leaves its arrival second if
        -- its first field reads)
        local job, enq = unpack_packed(value)
        local level_field = nil
        if job and job.level then  -- Levels: its job hash keeps it, for its retries
            level_field = job.level == 'h' and 'high' or 'low'
        end
        if not job then
            job = {problem = 'stored packed job does not parse (queue/envelope.py)'}
            -- The job hash gets the whole value as its payload: nothing else parsed.
            job.fields = {'payload', value}
        else
            local exp, ttl, max, trace = job[2], job[3], job[4], job[6]
            enq = job[1]
            -- The job hash of a corrupt job keeps every field that parsed, as its job
            -- hash would have held them (a dead letter an operator can read and requeue).
            job.fields = {'payload', job[7], 'enqueued_at', enq, 'expires_at', exp, 'ttl', ttl,
                'max_attempts', max, 'nonce', job[5]}
            if trace ~= '' then
                job.fields[#job.fields + 1] = 'trace_context'
                job.fields[#job.fields + 1] = trace
            end
            if level_field then
                job.fields[#job.fields + 1] = 'priority'
                job.fields[#job.fields + 1] = level_field
            end
            if #exp > 15 or #ttl > 15 or #max > 15 or tonumber(ttl) == 0 or tonumber(max) == 0 then
                job.problem = 'stored packed job holds an out-of-range number: ' .. shown(
                    exp .. ',' .. ttl .. ',' .. max)
            elseif not (string.find(exp, '^[1-9]') and string.find(ttl, '^[1-9]')
                    and string.find(max, '^[1-9]')) then
                -- A leading zero: the text is written as it is (job hash fields, the
                -- expiry score, SET EX of the ttl), and SET EX refuses "060" after this
                -- call's earlier writes; a number in Redis' own form is written as parsed.
                job.problem = 'stored packed job holds a number with a leading zero: ' .. shown(
                    exp .. ',' .. ttl .. ',' .. max)
            end
        end
        -- Fair share: taken from its key's list, it keeps its key (see the header).
        if fair_jobs and fair_jobs[ids[i]] then
            job.fields[#job.fields + 1] = 'fair_key'
            job.fields[#job.fields + 1] = fair_jobs[ids[i]]
        end
        arrival_leaves(leaving, enq, arrival_ms)
        unpacked[i] = job
        packed_keys[#packed_keys + 1] = job_keys[i]
    end
end
refusal = arrivals_refusal(leaving, 9)
if refusal then
    return refusal
end
-- A packed job has no job hash yet (the claim creates it): one EXISTS over those keys
-- stands for a read of each, the usual case; only if one exists (another type, or a hand
-- edit) is each read and checked like the others.
local records = {}
local read_packed = false
if #packed_keys > 0 then
    -- (pcall: a key this node does not serve, on a cluster, is refused before a write)
    local found = redis.pcall('EXISTS', unpack(packed_keys))
    if failed(found) then
        return found
    end
    read_packed = found > 0
end
for i = 1, n do
    if unpacked[i] and not read_packed then
        records[i] = {}
    else
        -- (fair_key: Fair share, read with the rest so a job that keeps it is not written)
        local f = redis.pcall('HMGET', job_keys[i], 'state', 'token', 'expires_at', 'ttl',
            'attempts', 'max_attempts', 'payload', 'trace_context', 'fair_key')
        if failed(f) then
            return job_refusal(i) or f
        end
        records[i] = f
    end
end

-- Taken here: the result keys a job past its TTL would be written to, read first (in no
-- KEYS, as the header says).
if take > 0 then
    local late = {}
    for i = 1, n do
        local job, f = unpacked[i], records[i]
        local deadline = job and not job.problem and tonumber(job[2]) or int(f[3])
        if deadline and now >= deadline then
            late[#late + 1] = result_keys[i]
        end
    end
    if #late > 0 then
        local found = redis.pcall('EXISTS', unpack(late))
        if failed(found) then
            return found
        end
    end
end

-- The writes. The leases, expiry deadlines and queued fields of the whole call are
-- written by one command each, after the loop (a redis.call costs more than its work).
local leases = {}
local deadlines = {}
local unqueued = {}
-- Job `job_id` starts: under a lease, counted started.
local function start(job_id)
    leases[#leases + 1] = lease_until
    leases[#leases + 1] = job_id
    started = started + 1
end
local function drop(job_id)
    redis.call('LREM', KEYS[1], 1, job_id)
end
-- Job i, past its TTL, is expired without starting: its result says so for `ttl`
-- seconds (text), its id is published.
local function expire(i, ttl)
    drop(ids[i])
    redis.call('ZREM', KEYS[2], ids[i])
    redis.call('SET', result_keys[i], '{"status":"expired","result":null,'
        .. '"error":"not started within its ttl of ' .. ttl .. ' s"}', 'EX', ttl)
    redis.call('PUBLISH', ARGV[3], ids[i])
    expired = expired + 1
end
-- Limits: given jobs past what the limits allow go back to the queue list, in place.
put_back(held_back)
-- Levels: a wake marker given is dropped.
drop_markers(false)
local dropped = 0  -- wake markers taken off the queue list here
local from_levels = 0  -- jobs taken off the high and low lists here
local from_keys = 0  -- jobs taken off fairness keys' lists here (Fair share)
local ring_left = 0  -- the ring's entries after the take (Fair share)
if take > 0 then
    -- The take: the ids read above, moved into processing one by one as the worker's
    -- LMOVE would (a take of several with LTRIM is a command no worker may run); each
    -- list's window tail first, a wake marker dropped where it stands (at the tail then).
    if not windows then
        for _ = 1, n do
            redis.call('LMOVE', KEYS[5], KEYS[1], 'RIGHT', 'LEFT')
        end
    else
        for _, window in ipairs(windows) do
            for _, entry in ipairs(window[2]) do
                if entry == WAKE_MARKER then
                    redis.call('LREM', window[1], -1, WAKE_MARKER)
                    dropped = dropped + 1
                else
                    redis.call('LMOVE', window[1], KEYS[1], 'RIGHT', 'LEFT')
                    if levels and (window[1] == levels[1][1] or window[1] == levels[3][1]) then
                        from_levels = from_levels + 1
                    elseif window[1] ~= KEYS[5] then
                        from_keys = from_keys + 1
                    end
                end
            end
        end
    end
    -- Fair share: the ring's next order (include/fair_turns.lua).
    if fair_write then
        fair_write(now_text)
        ring_left = redis.call('LLEN', KEYS[ring_index])
    end
    -- Levels: high or low jobs (or the ring's keys) still waiting wake the next idle
    -- worker (see the header).
    if level_waiting > from_levels or ring_left > 0 then
        wake_idle(KEYS[5], 1)
    end
end
local seen = {}
for i = 1, n do
    local job_id = ids[i]
    local token = tokens[i]
    local job_key = job_keys[i]
    local f = records[i]
    local state = f[1]
    local job = unpacked[i]
    if seen[job_id] then
        -- A second entry of a job this call already handled (read before that write):
        -- a stray, as below.
        drop(job_id)
        out[i + 1] = {job_id, 'skip'}
    elseif job then
        -- Enqueued and never claimed: unpack it into its job hash (or expire it).
        unqueued[#unqueued + 1] = job_id
        if not job.problem and now >= tonumber(job[2]) then
            expire(i, job[3])
            out[i + 1] = {job_id, 'expired', job[6] ~= '' and job[6] or false}
        else
            redis.call('HSET', job_key, 'state', 'running', 'attempts', '1', 'token', token,
                'worker', ARGV[2], 'started_at', now_text, unpack(job.fields))
            start(job_id)
            if job.problem then
                out[i + 1] = {job_id, 'corrupt', token, job.problem, now}
            else
                deadlines[#deadlines + 1] = job[2]
                deadlines[#deadlines + 1] = job_id
                out[i + 1] = {job_id, 'run', token, 1, job[4], job[2], job[7], now,
                    job[6] ~= '' and job[6] or false}
            end
        end
    elseif state == 'running' and f[2] == token then
        -- A replay of this very claim (the reply was lost): hand the lease back again.
        out[i + 1] = replayed(job_id, token, f)
    elseif f[3] and (not state or state == 'queued' or state == 'retrying') then
        -- (a record without a 'state' field is a job queued by enqueue)
        local problem = problem_of(f)
        arrived[#arrived + 1] = job_id
        if not problem and now >= int(f[3]) then
            -- The parsed ttl, written with %d: SET EX refuses the stored text if it has a
            -- leading zero ("060"), which int() reads.
            expire(i, string.format('%d', int(f[4])))
            redis.call('ZREM', KEYS[4], job_id)
            redis.call('DEL', job_key)
            out[i + 1] = {job_id, 'expired', f[8] or false}
        else
            -- The attempt this claim starts, written by the HSET (its value is known: a
            -- HINCRBY would cost one more command); an attempts field that does not parse
            -- is left as it is.
            local attempts = f[5] and int(f[5])
            if not f[5] or attempts then
                attempts = (attempts or 0) + 1
                redis.call('HSET', job_key, 'state', 'running', 'token', token,
                    'worker', ARGV[2], 'started_at', now_text, 'attempts', attempts)
            else
                redis.call('HSET', job_key, 'state', 'running', 'token', token,
                    'worker', ARGV[2], 'started_at', now_text)
            end
            start(job_id)
            if problem then
                out[i + 1] = {job_id, 'corrupt', token, problem, now}
            else
                out[i + 1] = {job_id, 'run', token, attempts, f[6], f[3], f[7], now,
                    f[8] or false}
            end
            -- Fair share: taken from a key's list, it keeps its key: one more HSET only
            -- for a job hash that lacks it (a job back on its key's list has it already).
            local fair_key = fair_jobs and fair_jobs[job_id]
            if fair_key and fair_key ~= f[9] then
                redis.call('HSET', job_key, 'fair_key', fair_key)
            end
        end
    else
        -- Not claimable (gone, finished, or a stray second entry of a running job):
        -- drop this processing entry only, count nothing. The usual stray is the entry
        -- of a job expired while it waited: expiry leaves it on the queue list.
        drop(job_id)
        if not f[3] then
            arrived[#arrived + 1] = job_id  -- its record is gone: it waits for nothing
        end
        out[i + 1] = {job_id, 'skip'}
    end
    seen[job_id] = true
end
if take > 0 then
    -- This call's marker (see the header): a reply lost for longer than its lease finds
    -- the leases lapsed anyway.
    redis.call('HSET', KEYS[11], 'ids', table.concat(ids, '\n'))
    redis.call('EXPIRE', KEYS[11], math.floor(lease_ms / 1000) + 1)
    if KEYS[12] ~= KEYS[11] then
        redis.call('HDEL', KEYS[12], 'ids')
    end
    left = left + level_waiting - (n - from_keys) - dropped + ring_left
end
if #unqueued > 0 then
    redis.call('HDEL', KEYS[7], unpack(unqueued))
end
if #leases > 0 then
    redis.call('ZADD', KEYS[2], unpack(leases))
end
if #deadlines > 0 then
    redis.call('ZADD', KEYS[4], unpack(deadlines))
end
if #arrived > 0 then
    redis.call('ZREM', KEYS[6], unpack(arrived))
end
arrivals_leave(leaving, 9, 8)
-- The last packed job gone: no arrival second may be left. One can be, if a packed value
-- whose arrival did not parse left (or a hand edit took one away); left, it would age
-- the oldest waiting job forever.
if next(unpacking) and redis.call('HLEN', KEYS[7]) == 0 and redis.call('ZCARD', KEYS[8]) > 0 then
    local stale = redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', '+inf', 'LIMIT', 0, 1000)
    redis.call('HDEL', KEYS[9], unpack(stale))
    redis.call('ZREM', KEYS[8], unpack(stale))
end
if started > 0 then
    redis.call('HINCRBY', KEYS[3], 'started', started)
end
-- Limits: the jobs started spend the rate, the ones held back are counted.
spend_rate(spend, started, now, rate_index)
if held_count > 0 then
    redis.call('HINCRBY', KEYS[3], bound, held_count)
end
-- Fair share: the jobs started from a key's list join its running set (while a cap is
-- set), and the passes of keys at their cap are counted.
if fair_state then
    local started_keys = {}
    for i = 1, n do
        local entry = out[i + 1]
        if fair_jobs[ids[i]] and (entry[2] == 'run' or entry[2] == 'corrupt') then
            started_keys[ids[i]] = fair_jobs[ids[i]]
        end
    end
    fair_running(fair_state, started_keys, now_text)
    if fair_state.capped > 0 then
        redis.call('HINCRBY', KEYS[3], 'held_back_max_running_per_key', fair_state.capped)
    end
end
if expired > 0 then
    redis.call('HINCRBY', KEYS[3], 'expired', expired)
end
out[1] = left
return out
