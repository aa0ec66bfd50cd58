-- Complete jobs successfully, each fenced by its lease token: store each result with its
-- job's TTL, record the three histograms, then publish each completion event. One call
-- completes the jobs a worker finished close together (n >= 1): what they share (the key
-- checks, the stats read, the counters and the lease and expiry removals) is done once.
-- KEYS[1] processing list  KEYS[2] leases zset  KEYS[3] expiry zset  KEYS[4] stats hash
-- KEYS[3+2i] job hash of job i, KEYS[4+2i] its result key (i = 1..n)
-- KEYS[5+2n] cancels hash (the last key: job id -> reason of a cancel request)
-- ARGV[1] completion channel  ARGV[2] m, the number of finite bucket bounds
-- ARGV[3..2+2m] pairs (upper bound in seconds, bucket suffix '_le:<bound>'), ascending
-- ARGV[3+2m] the +Inf bucket suffix ('_le:+Inf')
-- ARGV[4+2m+3(i-1)..] job i: job id, lease token, result JSON (already encoded)
-- The histograms (stats fields <name><suffix>, <name>_sum, <name>_count, all three with
-- the same bounds):
--   latency  enqueued_at (a scheduled job's run_at) -> now: the job's whole life,
--            retries and backoffs included
--   wait     the succeeding attempt's becoming due (due_at of its retry, else run_at,
--            else enqueued_at) -> its started_at: time spent waiting for a worker
--   run      started_at -> now: the succeeding attempt in the handler
-- Exemplars: a job whose stored trace_context holds a W3C traceparent with a valid trace
-- id (32 lowercase hex digits, not all zeros) leaves, beside each bucket it is counted in,
-- the stats field <name>_ex:<bound> = "<trace id> <seconds> <now ms>" (keys.py's
-- EXEMPLAR_FIELD_FORMAT): overwritten, so one field per bucket at most; the last job of
-- the call wins. A job of an enqueue_many batch ("relation":"link") leaves none: its
-- worker processes it in a trace of its own, which is not the stored one. A trace
-- context that does not hold one is no error: the job completes, with no exemplar.
-- Returns one entry per job, in order: {"ok"}, {"replay"} (this completion already
-- happened), {"lost", state}, {"cancelled"} (see Cancel below), or the error
-- "CORRUPT <position in KEYS> <problem>" in place when its job key holds another type
-- or a field it reads (enqueued_at, ttl, started_at, due_at, run_at) does not parse:
-- that job is not written, the others are (trace_context is read too, but only ever
-- decides whether an exemplar is written).
-- All-or-nothing: every job is read and judged before the first write. A shared key of
-- another type or a stats field this call bumps that does not parse refuses the whole
-- call with the error reply "CORRUPT <position in KEYS> <problem>" (nothing written);
-- the caller then completes each job alone, so one bad field fails only its own jobs.
-- Cancel (queue/cancel.py): a running job with a cancel request (its entry in the cancels
-- hash, the reason; one HMGET for the call, before the first write) is never completed:
-- its result says cancelled with the reason, state cancelled, counted in `cancelled`,
-- published, its entry deleted; the handler's value is dropped. A cancels key of
-- another type refuses the whole call.
-- @include time
-- @include counts
local n = (#KEYS - 5) / 2
local cancels_key = 5 + 2 * n
local m = tonumber(ARGV[2])
local first_job = 4 + 2 * m

-- A float as HINCRBYFLOAT accepts one (no spaces, finite), or nil.
local function float(value)
    if type(value) ~= 'string' or not string.find(value, '^[%-%+]?[%d%.]+[eE]?[%-%+]?%d*$') then
        return nil
    end
    local number = tonumber(value)
    if number and number == number and number > -math.huge and number < math.huge then
        return number
    end
    return nil
end

-- The trace id of a job's stored trace context, or nil: none, longer than a worker reads
-- (queue/trace_context.py's MAX_TRACE_CONTEXT_LENGTH), a batch job's, or an id that is
-- not 32 lowercase hex digits or is all zeros (W3C's invalid id). The context is the
-- producer's compact JSON, whose traceparent is "<version>-<trace id>-<span id>-<flags>":
-- found by plain search and cut by position (a pattern match costs several times more;
-- JSON spaced by hand gets no exemplar).
local function trace_id_of(stored)
    if not stored or #stored > 16384 or string.find(stored, '"relation":"link"', 1, true) then
        return nil
    end
    local at = string.find(stored, '"traceparent":"', 1, true)
    if not at or string.byte(stored, at + 17) ~= 45 or string.byte(stored, at + 50) ~= 45 then
        return nil  -- 45: '-', around the id
    end
    local trace_id = string.sub(stored, at + 18, at + 49)
    if not string.find(trace_id, '^[0-9a-f]+$')
            or trace_id == '00000000000000000000000000000000' then
        return nil
    end
    return trace_id
end

-- Each job read and judged: a final entry (lost, replay, corrupt), or the plan of its
-- writes {ttl text, {latency, wait, run} seconds, trace id or nil}.
local now = now_ms()
-- As text, formatted once (Redis formats a number argument with printf, per command).
local now_text = string.format('%d', now)
local entries = {}
local plans = {}
local seen = {}
local done = 0
-- ---- cancel (queue/cancel.py): {i, ttl text} of the requested jobs, ended cancelled ----
local cancels = {}
local ids = {}
for i = 1, n do
    ids[i] = ARGV[first_job + 3 * (i - 1)]
end
local asked = redis.pcall('HMGET', KEYS[cancels_key], unpack(ids))
if failed(asked) then
    return wrong_type(cancels_key, 'hash') or asked
end
-- ---- end cancel ----
-- The refusal of job hash KEYS[key] whose field `field` holds `raw`, which does not parse.
local function unparsed(key, field, raw)
    return corrupt(key, 'field ' .. field .. ' of the job does not parse: ' .. shown(raw))
end
for i = 1, n do
    local key = 3 + 2 * i
    local job_id = ARGV[first_job + 3 * (i - 1)]
    local f = redis.pcall('HMGET', KEYS[key], 'state', 'token', 'enqueued_at', 'ttl',
        'started_at', 'due_at', 'run_at', 'trace_context')
    local state = f[1]
    -- (a ttl with a leading zero, "060", is refused too: SET EX and EXPIRE refuse it as
    -- stored, so it is refused here, before any write, like any ttl that does not parse)
    local ttl = int(f[4])
    if ttl and (ttl <= 0 or not string.find(f[4], '^[1-9]')) then
        ttl = nil
    end
    if f.err then
        entries[i] = wrong_type(key, 'hash') or f
    elseif f[2] ~= ARGV[first_job + 3 * (i - 1) + 1] then
        entries[i] = {'lost', state or 'missing'}
    elseif seen[job_id] then
        -- The same completion twice in one call (read before the first one's write).
        entries[i] = {'replay'}
    elseif state ~= 'running' then
        if state == 'succeeded' then
            entries[i] = {'replay'}
        elseif state == 'cancelled' then
            entries[i] = {'cancelled'}  -- cancel: this call's replay, or its own
        else
            entries[i] = {'lost', state or 'missing'}
        end
    -- ---- cancel: a requested job ends cancelled, its value unstored ----
    elseif asked[i] then
        if not ttl then
            entries[i] = unparsed(key, 'ttl', f[4])
        else
            cancels[#cancels + 1] = {i, string.format('%d', ttl), asked[i]}
            seen[job_id] = true
        end
    -- ---- end cancel ----
    else
        local enqueued_at = int(f[3])
        local started_at = int(f[5])
        -- run_at: the job was scheduled (enqueued with a delay), its life begins then.
        local run_at = f[7] and int(f[7])
        local born = run_at or enqueued_at
        -- due_at is written when a failed attempt was scheduled for a retry.
        local due_at = born
        if f[6] then
            due_at = int(f[6])
        end
        if not enqueued_at then
            entries[i] = unparsed(key, 'enqueued_at', f[3])
        elseif not ttl then
            entries[i] = unparsed(key, 'ttl', f[4])
        elseif not started_at then
            entries[i] = unparsed(key, 'started_at', f[5])
        elseif not due_at then
            entries[i] = unparsed(key, 'due_at', f[6])
        elseif f[7] and not run_at then
            entries[i] = unparsed(key, 'run_at', f[7])
        else
            -- Seconds between two ms timestamps, never negative (a clock step, a
            -- hand-edited field).
            -- Numbers are written as parsed, with %d, never as the stored text.
            plans[i] = {string.format('%d', ttl), {
                math.max(0, now - born) / 1000,
                math.max(0, started_at - due_at) / 1000,
                math.max(0, now - started_at) / 1000,
            }, trace_id_of(f[8])}
            seen[job_id] = true
            done = done + 1
        end
    end
end
-- ---- cancel: its counter checked with the others, its writes apart (below) ----
if #cancels > 0 then
    local refused = wrong_types({{1, 'list'}, {2, 'zset'}, {3, 'zset'}})
        or count_refusal(4, 'cancelled')
    if refused then
        return refused
    end
end
local function write_cancels()
    for _, cancel in ipairs(cancels) do
        local i, ttl, reason = cancel[1], cancel[2], cancel[3]
        local job_id = ARGV[first_job + 3 * (i - 1)]
        redis.call('SET', KEYS[4 + 2 * i], '{"status":"cancelled","result":null,"error":'
            .. cjson.encode(reason ~= '' and reason or 'cancelled') .. '}', 'EX', ttl)
        redis.call('HSET', KEYS[3 + 2 * i], 'state', 'cancelled', 'finished_at', now_text)
        redis.call('EXPIRE', KEYS[3 + 2 * i], ttl)
        redis.call('LREM', KEYS[1], -1, job_id)
        redis.call('ZREM', KEYS[2], job_id)
        redis.call('ZREM', KEYS[3], job_id)
        entries[i] = {'cancelled'}
    end
    if #cancels > 0 then
        redis.call('HINCRBY', KEYS[4], 'cancelled', #cancels)
        local settled = {}
        for c, cancel in ipairs(cancels) do
            settled[c] = ids[cancel[1]]
        end
        redis.call('HDEL', KEYS[cancels_key], unpack(settled))
    end
end
local function publish_cancels()
    for _, cancel in ipairs(cancels) do
        redis.call('PUBLISH', ARGV[1], ARGV[first_job + 3 * (cancel[1] - 1)])
    end
end
if done == 0 then
    write_cancels()
    publish_cancels()
    return entries
end
-- ---- end cancel ----

local refusal = wrong_types({{1, 'list'}, {2, 'zset'}, {3, 'zset'}})
if refusal then
    return refusal
end

-- What the counters and histograms gain: field -> increment, in first-seen order.
local bounds = {}
for b = 1, m do
    bounds[b] = tonumber(ARGV[1 + 2 * b])
end
local function suffix_of(value)
    for b = 1, m do
        if value <= bounds[b] then
            return ARGV[2 + 2 * b]
        end
    end
    return ARGV[3 + 2 * m]
end
local names = {'latency', 'wait', 'run'}
local counters = {'completed', 'latency_count', 'wait_count', 'run_count'}
local added = {completed = done, latency_count = done, wait_count = done, run_count = done}
local sums = {0, 0, 0}
-- Exemplar field -> value, fields in first-seen order: HSET pairs, one call.
local exemplars = {}
local exemplar_fields = {}
for i = 1, n do
    local plan = plans[i]
    if plan then
        local trace_id = plan[3]
        for h = 1, 3 do
            local value = plan[2][h]
            sums[h] = sums[h] + value
            local suffix = suffix_of(value)
            local field = names[h] .. suffix
            if added[field] then
                added[field] = added[field] + 1
            else
                counters[#counters + 1] = field
                added[field] = 1
            end
            if trace_id then
                -- '_le:<bound>' -> '<name>_ex:<bound>'
                local exemplar = names[h] .. '_ex' .. string.sub(suffix, 4)
                if not exemplars[exemplar] then
                    exemplar_fields[#exemplar_fields + 1] = exemplar
                end
                -- Whole ms, so '%.3f' writes the value exactly (and within its bound).
                exemplars[exemplar] = trace_id .. string.format(' %.3f ', value) .. now_text
            end
        end
    end
end
-- Every field this call bumps is checked, so that no HINCRBY fails halfway.
local read = {unpack(counters)}
local first_sum = #read + 1
for h = 1, 3 do
    read[#read + 1] = names[h] .. '_sum'
end
local stats = redis.pcall('HMGET', KEYS[4], unpack(read))
refusal = counts_refusal(4, counters, stats)
if refusal then
    return refusal
end
for h = 1, 3 do
    local value = stats[first_sum + h - 1]
    if value and not float(value) then
        return corrupt(4, 'field ' .. read[first_sum + h - 1] .. ' is not a number: '
            .. shown(value))
    end
end

local finished = {}
for i = 1, n do
    local plan = plans[i]
    if plan then
        local base = first_job + 3 * (i - 1)
        local job_id = ARGV[base]
        redis.call('SET', KEYS[4 + 2 * i],
            '{"status":"succeeded","result":' .. ARGV[base + 2] .. ',"error":null}',
            'EX', plan[1])
        redis.call('HSET', KEYS[3 + 2 * i], 'state', 'succeeded', 'finished_at', now_text)
        redis.call('EXPIRE', KEYS[3 + 2 * i], plan[1])
        -- From the tail: jobs finish roughly in the order they were taken (LMOVE puts
        -- the newest at the head), so the entry is found within a few steps.
        redis.call('LREM', KEYS[1], -1, job_id)
        finished[#finished + 1] = job_id
        entries[i] = {'ok'}
    end
end
redis.call('ZREM', KEYS[2], unpack(finished))
redis.call('ZREM', KEYS[3], unpack(finished))
for _, field in ipairs(counters) do
    redis.call('HINCRBY', KEYS[4], field, added[field])
end
for h = 1, 3 do
    redis.call('HINCRBYFLOAT', KEYS[4], names[h] .. '_sum', sums[h])
end
if #exemplar_fields > 0 then
    local written = {}
    for _, field in ipairs(exemplar_fields) do
        written[#written + 1] = field
        written[#written + 1] = exemplars[field]
    end
    redis.call('HSET', KEYS[4], unpack(written))
end
write_cancels()  -- cancel
-- The events last: a subscriber reading the result finds it stored.
for _, job_id in ipairs(finished) do
    redis.call('PUBLISH', ARGV[1], job_id)
end
publish_cancels()  -- cancel
return entries
