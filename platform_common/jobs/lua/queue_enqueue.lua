-- Enqueue a batch of jobs of one agent type, all or nothing.
-- KEYS[1] queue list   KEYS[2] stats hash   KEYS[3] queued hash   KEYS[4] expiring zset
-- KEYS[5] arrivals zset   KEYS[6] arrived hash   KEYS[7] deadline mark (string)
-- KEYS[5+3i] job hash of job i, KEYS[6+3i] its result key, KEYS[7+3i] its expiry bucket
--           list (keys.py QueueKeys.expiring_bucket of its deadline), written only if
--           the job is not in deadline order (below)
-- ARGV[1]   nonce: identifies this call, so a call retried after a lost reply is
--           recognised as its own replay instead of a duplicate
-- ARGV[2]   n, the number of jobs
-- ARGV[3]   the earliest Redis TIME (ms) the call may run at: the latest created_at of
--           the whole enqueue_many batch minus the clock skew allowed, so every chunk of
--           a batch refuses a created_at too far ahead together
-- ARGV[4]   the earliest deadline (created_at + ttl, ms) of the whole batch: at or past
--           it by Redis TIME (the clock the worker expires jobs by) every chunk refuses
-- ARGV[5]   the expiry bucket width (ms)   ARGV[6] the arrival bucket width (ms)
-- then 5 arguments per job i (base = 6 + 5*(i-1)):
--           job_id, payload JSON, ttl seconds, created_at ms, max attempts
-- ARGV[7+5n] optional: the trace context of every job of the call (a JSON object of
--           propagation headers), kept with the job; absent or "" keeps none
-- ARGV[8+5n] optional: the schedule of every job of the call: "@<ms>" due at that time,
--           "+<ms>" due that long after Redis TIME; absent or "" runs them now. Then
--           KEYS[8+3n] is the delayed zset and KEYS[9+3n] the expiry zset (see Scheduled)
-- ARGV[9+5n] optional: the priority level of every job of the call, "h" (high) or "l"
--           (low); absent or "" is normal (queue/priority.py). Then KEYS[10+3n] is that
--           level's list (and KEYS[8+3n], KEYS[9+3n] are given too; see Levels)
-- ARGV[10+5n] optional: each job's fairness values (include/fair_keys.lua fair_keys_of:
--           its tenant, orchestrator_id and session_id, each "<bytes>:<value>"), for
--           a call of normal jobs, scheduled or not; then KEYS[11+3n] is the limits
--           hash and KEYS[12+3n] the ring (keys.py `fair`), and ARGV[8+5n], ARGV[9+5n],
--           KEYS[8+3n..10+3n] are given too (see Fair share)
-- A job is written packed into one field of the queued hash (queue/envelope.py):
--   <enqueued_at>,<expires_at>,<ttl>,<max_attempts>,<nonce>[,o]\n<trace context>\n<payload>
-- plus its id on the queue list and a count in its arrival second: no key of its own
-- until a worker claims it.
-- Deadline order: a job whose deadline is no earlier than the deadline mark (KEYS[7])
-- minus the expiry bucket width is written "in order" (",o" in its header) and raises
-- the mark to its deadline; the ordered jobs of the queue list then wait in deadline
-- order (within a bucket width), so the cleanup expires them from the list's tail
-- (lua/queue_expire_tail.lua) and they need no bucket entry. Any other job (a shorter
-- TTL than the jobs ahead of it) gets its id into its expiry bucket. The mark is kept
-- rounded up to a bucket boundary (written once per bucket width, not per job) and
-- expires a bucket width after it, when every ordered job under it is past its deadline.
-- Scheduled: each job is written as a retry waits (keys.py): its job hash (the fields the
-- claim unpacks a packed job into, plus run_at, the due time), its id in the delayed set
-- (score: the due time; the promoter queues it then) and in the expiry set (its
-- deadline); not packed, not on the queue list, no arrival count, the deadline mark
-- untouched. A due time at or after a job's deadline is refused: {"late", now, due}.
-- Levels: a high or low job is written as a normal one is, except that its id goes on
-- its level's list (KEYS[10+3n]) instead of the queue list, its header ends in ",h" or
-- ",l" (never in deadline order: it gets its expiry bucket entry), and, while the queue
-- list is empty, a wake marker goes there (include/levels.lua). A scheduled one keeps
-- its level in its job hash (`priority`). Either counts its jobs in the stats field
-- `leveled` (the claim looks at the levels' lists only once it is above 0).
-- Fair share (include/fair_keys.lua): with the fairness values given, a call of normal
-- jobs reads the limits' `fair_by` (one HGET); when it names a field, each job that has
-- that field waits on its key's list instead of the queue list (never in deadline order:
-- it gets its expiry bucket entry, as a level's job does), its key joins the ring if its
-- list was empty, a wake marker goes on the queue list while that is empty, and the
-- stats field `fair_keyed` counts the jobs (the claim reads the ring only once it is
-- above 0). A scheduled one keeps its key in its job hash (`fair_key`), for the
-- promoter, which queues it on its key's list, and is counted in `fair_keyed` now. A
-- fairness value that does not parse is refused before any write.
-- Returns {"ok", written}, {"duplicate", job_id...} (an id is taken while it waits, or its
-- record or its result exists: a new job must never read an old job's outcome),
-- {"ahead", now} (`now`, Redis TIME in ms, is before ARGV[3]) or {"expired", now} (`now`
-- is at or past ARGV[4], and the call is not its own replay); these write nothing.
-- A key of another type or a count that is not an integer is refused with the error
-- reply "CORRUPT <position in KEYS> <problem>", nothing written: before the first write,
-- or (the arrival count, the arrivals set, the stats counter) by undoing what this call
-- wrote of them.
-- @include time
-- @include counts
-- @include packed_header
-- @include levels
-- @include fair_keys
local nonce = ARGV[1]
local n = tonumber(ARGV[2])
local trace_context = ARGV[7 + 5 * n] or ''
local schedule = ARGV[8 + 5 * n]
-- Levels: the call's level code and list (nil for normal), checked before any write.
local level = ARGV[9 + 5 * n]
local level_key = nil
if level and level ~= '' then
    if level ~= 'h' and level ~= 'l' then
        return redis.error_reply('ERR queue_enqueue: the priority level must be "h" or "l",'
            .. ' got ' .. shown(level))
    end
    level_key = 10 + 3 * n
else
    level = nil
end
local now = now_ms()
if now < tonumber(ARGV[3]) then
    return {'ahead', now}
end

-- (Tables and strings are made only where needed: a lone enqueue is one job, and its
-- script's own work costs about as much as its Redis calls.)
local ids = {}
local existing
if n == 1 then
    ids[1] = ARGV[7]
    existing = redis.call('EXISTS', KEYS[8], KEYS[9])
else
    -- One EXISTS over every job and result key: in the usual case none exists, and the
    -- per-job look (duplicate, or our own replay already claimed?) is skipped.
    local job_keys = {}
    for i = 1, n do
        ids[i] = ARGV[7 + 5 * (i - 1)]
        job_keys[2 * i - 1] = KEYS[5 + 3 * i]
        job_keys[2 * i] = KEYS[6 + 3 * i]
    end
    existing = redis.call('EXISTS', unpack(job_keys))
end
-- A waiting job of this id: ours (same nonce, our own replay) or a duplicate. The read
-- doubles as the type check of the queued hash (a TYPE call each costs as much).
local waiting = redis.pcall('HMGET', KEYS[3], unpack(ids))
if waiting.err then
    return wrong_type(3, 'hash') or waiting
end
local duplicates = {}
local replayed = {}
local any_replayed = false
if n > 1 or existing > 0 or waiting[1] then
    for i = 1, n do
        local packed = waiting[i]
        if packed then
            local job = unpack_packed(packed)
            if job and job[5] == nonce then
                replayed[i] = true
            else
                duplicates[#duplicates + 1] = ids[i]
            end
        elseif existing > 0 then
            local job_key = KEYS[5 + 3 * i]
            if redis.call('EXISTS', job_key) == 1 then
                local refusal = wrong_type(5 + 3 * i, 'hash')
                if refusal then
                    return refusal
                end
                if redis.call('HGET', job_key, 'nonce') == nonce then
                    replayed[i] = true
                else
                    duplicates[#duplicates + 1] = ids[i]
                end
            elseif redis.call('EXISTS', KEYS[6 + 3 * i]) == 1 then
                duplicates[#duplicates + 1] = ids[i]
            end
        end
        any_replayed = any_replayed or replayed[i] == true
    end
end
if #duplicates > 0 then
    return {'duplicate', unpack(duplicates)}
end

-- Fair share: each job's fairness key ({[i] = key}, the jobs without one absent), when
-- the limits name a field and the call is of normal jobs; else nil.
local fair_keys = nil
local fair_values = ARGV[10 + 5 * n]
if fair_values and fair_values ~= '' and not level then
    local by = redis.pcall('HGET', KEYS[11 + 3 * n], 'fair_by')
    if type(by) == 'table' then
        return wrong_type(11 + 3 * n, 'hash') or by
    end
    if by and FAIR_FIELDS[by] then
        local problem
        fair_keys, problem = fair_keys_of(fair_values, n, FAIR_FIELDS[by])
        if not fair_keys then
            return redis.error_reply('ERR queue_enqueue: ' .. problem)
        end
        if next(fair_keys) == nil then
            fair_keys = nil
        end
    end
end

-- Scheduled: job hashes in the delayed and expiry sets (see the header).
if schedule and schedule ~= '' then
    local kind, amount = string.sub(schedule, 1, 1), int(string.sub(schedule, 2))
    if (kind ~= '@' and kind ~= '+') or not amount or amount < 0 then
        return redis.error_reply('ERR queue_enqueue: the schedule must be "@<ms>" or "+<ms>", got '
            .. shown(schedule))
    end
    local due = kind == '@' and amount or now + amount
    local jobs = {}
    local keyed = 0  -- Fair share: the jobs of this call that keep a key (for the promoter)
    for i = 1, n do
        if not replayed[i] then
            local base = 6 + 5 * (i - 1)
            local ttl = int(ARGV[base + 3])
            local created = int(ARGV[base + 4])
            local attempts = int(ARGV[base + 5])
            if not ttl or not created or not attempts then
                return redis.error_reply('ERR queue_enqueue: job ' .. i .. ' has no integer ttl,'
                    .. ' created_at or max attempts argument')
            end
            local expires_at = created + ttl * 1000
            if due >= expires_at then
                return {'late', now, string.format('%d', due)}
            end
            jobs[#jobs + 1] = {i, expires_at, ttl, attempts}
            if fair_keys and fair_keys[i] then
                keyed = keyed + 1
            end
        end
    end
    if #jobs == 0 then
        return {'ok', 0}
    end
    if now >= tonumber(ARGV[4]) then
        return {'expired', now}
    end
    local delayed, expiry = 8 + 3 * n, 9 + 3 * n
    local problem = wrong_type(delayed, 'zset') or wrong_type(expiry, 'zset')
        or (level and count_refusal(2, 'leveled'))
        or (keyed > 0 and count_refusal(2, 'fair_keyed'))
    if problem then
        return problem
    end
    -- The first write, and the one Redis refuses at maxmemory: its HINCRBY checks the
    -- counter itself. (A job key written below does not exist: one that did was judged a
    -- replay or a duplicate above, or refused for its type.)
    local counted = redis.pcall('HINCRBY', KEYS[2], 'enqueued', #jobs)
    if type(counted) == 'table' then
        local err = counted.err
        if string.find(err, 'not an integer', 1, true) or string.find(err, 'overflow', 1, true) then
            return corrupt(2, 'field enqueued: ' .. err)
        end
        if string.sub(err, 1, 10) == 'WRONGTYPE ' then
            return wrong_type(2, 'hash') or counted
        end
        return counted  -- Redis at maxmemory (OOM), or another refusal: as Redis said it
    end
    if level then
        redis.call('HINCRBY', KEYS[2], 'leveled', #jobs)  -- checked above
    end
    if keyed > 0 then
        redis.call('HINCRBY', KEYS[2], 'fair_keyed', keyed)  -- checked above
    end
    local now_text, due_text = string.format('%d', now), string.format('%d', due)
    local dues, deadlines = {}, {}
    for _, job in ipairs(jobs) do
        local i, expires_at = job[1], string.format('%d', job[2])
        local id = ids[i]
        local fields = {'payload', ARGV[6 + 5 * (i - 1) + 2], 'enqueued_at', now_text,
            'expires_at', expires_at, 'ttl', string.format('%d', job[3]),
            'max_attempts', string.format('%d', job[4]), 'nonce', nonce, 'run_at', due_text}
        if level then  -- Levels: kept for the promoter, which queues it on its list
            fields[#fields + 1] = 'priority'
            fields[#fields + 1] = level == 'h' and 'high' or 'low'
        end
        if trace_context ~= '' then
            fields[#fields + 1] = 'trace_context'
            fields[#fields + 1] = trace_context
        end
        if fair_keys and fair_keys[i] then  -- Fair share: for the promoter, as `priority`
            fields[#fields + 1] = 'fair_key'
            fields[#fields + 1] = fair_keys[i]
        end
        redis.call('HSET', KEYS[5 + 3 * i], unpack(fields))
        dues[#dues + 1] = due_text
        dues[#dues + 1] = id
        deadlines[#deadlines + 1] = expires_at
        deadlines[#deadlines + 1] = id
    end
    redis.call('ZADD', KEYS[delayed], unpack(dues))
    redis.call('ZADD', KEYS[expiry], unpack(deadlines))
    return {'ok', #jobs}
end

-- The deadline mark: its GET doubles as its type check.
local mark = redis.pcall('GET', KEYS[7])
if type(mark) == 'table' then
    return wrong_type(7, 'string') or mark
end
if mark then
    if #mark > 15 or not string.find(mark, '^[1-9]%d*$') then
        return corrupt(7, 'deadline mark is not an integer')
    end
    mark = tonumber(mark)
end
local stored_mark = mark

-- One HSET, one LPUSH and one RPUSH per expiry bucket for the whole batch: a redis.call
-- per job costs more than the command itself. unpack() is bounded by Lua's C stack
-- (about 8,000 values), far above the 2 x 500 of a full chunk (producer.ENQUEUE_CHUNK).
-- LPUSH a b c pushes in order (a nearest the tail), exactly as three LPUSHes would, so
-- the jobs are judged for deadline order in that order. Everything is computed before
-- the first write.
local bucket_ms = tonumber(ARGV[5])
local packed = {}
-- The ids for the queue list (all, in the usual call), and (Fair share) for keys' lists.
local pushed = (any_replayed or fair_keys) and {} or ids
local fair_ids, fair_order, fair_count = {}, {}, 0
local buckets = {}  -- of the jobs out of deadline order: {position in KEYS, start, ids}
local by_key = nil
for i = 1, n do
    if not replayed[i] then
        local base = 6 + 5 * (i - 1)
        local ttl = tonumber(ARGV[base + 3])
        local created = tonumber(ARGV[base + 4])
        local attempts = tonumber(ARGV[base + 5])
        if not ttl or not created or not attempts then
            return redis.error_reply('ERR queue_enqueue: job ' .. i .. ' has no numeric ttl,'
                .. ' created_at or max attempts argument')
        end
        -- Integers bounded by validation (TTL, clock skew): the sum stays far below 2^53
        -- and %d writes it in integer digits.
        local expires_at = created + ttl * 1000
        local header = string.format('%d,%d,%d,%d,%s', now, expires_at, ttl, attempts, nonce)
        -- (Levels: a high or low job waits on its own list, never in deadline order; so
        -- does a job of a fairness key.)
        local fair_key = fair_keys and fair_keys[i]
        local ordered = not level and not fair_key and (not mark or expires_at >= mark - bucket_ms)
        if ordered then
            if not mark or expires_at > mark then
                mark = expires_at
            end
        else
            local position = 7 + 3 * i
            by_key = by_key or {}
            local bucket = by_key[KEYS[position]]
            if not bucket then
                bucket = {position, expires_at - expires_at % bucket_ms, {}}
                by_key[KEYS[position]] = bucket
                buckets[#buckets + 1] = bucket
            end
            bucket[3][#bucket[3] + 1] = ids[i]
        end
        packed[#packed + 1] = ids[i]
        local suffix = ordered and ',o\n' or (level and (',' .. level .. '\n') or '\n')
        packed[#packed + 1] = header .. suffix .. trace_context .. '\n' .. ARGV[base + 2]
        if fair_key then
            fair_count = fair_count + 1
            if not fair_ids[fair_key] then
                fair_ids[fair_key] = {}
                fair_order[#fair_order + 1] = fair_key
            end
            local on_key = fair_ids[fair_key]
            on_key[#on_key + 1] = ids[i]
        elseif any_replayed or fair_keys then
            pushed[#pushed + 1] = ids[i]
        end
    end
end
local written = #pushed + fair_count
if written == 0 then
    return {'ok', 0}
end
-- Judged here, not by the producer's clock: a job the worker would expire unrun is refused.
-- (After the replay check: a call written before the deadline passed stays answered "ok".)
if now >= tonumber(ARGV[4]) then
    return {'expired', now}
end
-- Rounded up to a bucket boundary: the next bucket width of jobs leaves it as it is.
local new_mark = nil
if mark and (not stored_mark or mark > stored_mark) then
    new_mark = mark - mark % bucket_ms + bucket_ms
    if stored_mark and new_mark <= stored_mark then
        new_mark = nil
    end
end
-- The type checks, a TYPE call each, only of what this call writes: a bucket that exists
-- is registered in the expiring set already, so the usual call, of jobs in deadline
-- order, writes neither and checks neither. (The arrival count and the arrivals set are
-- checked by their own writes, below.)
local problem = wrong_type(1, 'list') or (level_key and wrong_type(level_key, 'list'))
local new_bucket = false
for b = 1, #buckets do
    local bucket = buckets[b]
    local found = redis.call('TYPE', KEYS[bucket[1]]).ok
    if found == 'none' then
        bucket[4] = true  -- new: registered in the expiring set once written
        new_bucket = true
    elseif found ~= 'list' and not problem then
        problem = corrupt(bucket[1], 'holds a ' .. found .. ', where the queue keeps a list')
    end
end
if new_bucket then
    problem = problem or wrong_type(4, 'zset')
end
-- (Levels: the stats field `leveled`, Fair share: `fair_keyed`, checked before the first
-- write, as `enqueued` is by its own HINCRBY)
problem = problem or (level and count_refusal(2, 'leveled'))
if fair_count > 0 and not problem then
    local ring = KEYS[12 + 3 * n]
    problem = wrong_type(12 + 3 * n, 'list') or count_refusal(2, 'fair_keyed')
    if not problem then
        local _
        _, problem = fair_joining(ring, fair_order)
    end
end
if problem then
    return problem
end
-- The writes that can still fail on what is stored go first, each undone if a later one
-- fails, so a refusal leaves nothing written. The arrival count is the first write of all
-- (also the one Redis refuses at maxmemory): its HINCRBY checks the hash's type and the
-- count's integer text itself, where a read before it would cost a call per enqueue.
local second = now - now % tonumber(ARGV[6])
local count = redis.pcall('HINCRBY', KEYS[6], second, written)
if type(count) == 'table' then
    local err = count.err
    if string.find(err, 'not an integer', 1, true) or string.find(err, 'overflow', 1, true) then
        local value = redis.call('HGET', KEYS[6], second)
        return corrupt(6, 'field ' .. second .. ' is not an integer: ' .. shown(value))
    end
    if string.sub(err, 1, 10) == 'WRONGTYPE ' then
        return wrong_type(6, 'hash') or count
    end
    return count  -- Redis at maxmemory (OOM), or another refusal: as Redis said it
end
-- A new second (no count before: the scripts that drop a count at 0 drop its entry in
-- the arrivals set too) is registered there.
local registered = 0
local function undo_arrival()
    -- Back to no count (a count is never left at 0), and out of the arrivals set if
    -- this call put it there.
    if redis.call('HINCRBY', KEYS[6], second, -written) == 0 then
        redis.call('HDEL', KEYS[6], second)
    end
    if registered == 1 then
        redis.call('ZREM', KEYS[5], second)
    end
end
if count == written then
    local added = redis.pcall('ZADD', KEYS[5], second, second)
    if type(added) == 'table' then
        undo_arrival()
        return wrong_type(5, 'zset') or added
    end
    registered = added
end
local counted = redis.pcall('HINCRBY', KEYS[2], 'enqueued', written)
if type(counted) == 'table' then
    undo_arrival()
    return corrupt(2, 'field enqueued: ' .. counted.err)
end
if level then
    redis.call('HINCRBY', KEYS[2], 'leveled', written)  -- checked above
end
if fair_count > 0 then
    redis.call('HINCRBY', KEYS[2], 'fair_keyed', fair_count)  -- checked above
end
redis.call('HSET', KEYS[3], unpack(packed))
if new_mark then
    redis.call('SET', KEYS[7], new_mark, 'PXAT', new_mark + bucket_ms)
end
for b = 1, #buckets do
    local bucket = buckets[b]
    redis.call('RPUSH', KEYS[bucket[1]], unpack(bucket[3]))
    if bucket[4] then
        redis.call('ZADD', KEYS[4], bucket[2], bucket[2])
    end
end
if level_key then
    -- Levels: the ids on their level's list; a wake marker while the queue list is
    -- empty (an idle worker blocks there).
    redis.call('LPUSH', KEYS[level_key], unpack(pushed))
    wake_idle(KEYS[1], written)
    return {'ok', written}
end
if #pushed > 0 then
    redis.call('LPUSH', KEYS[1], unpack(pushed))
end
if fair_count > 0 then
    -- Fair share: the ids on their keys' lists, each new key into the ring; a wake
    -- marker while the queue list is empty (an idle worker blocks there).
    fair_push(KEYS[12 + 3 * n], fair_ids, fair_order, string.format('%d', now))
    wake_idle(KEYS[1], fair_count)
end
return {'ok', written}
