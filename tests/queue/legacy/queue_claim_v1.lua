-- Claim jobs a worker has just moved into the processing list: start an attempt
-- under a lease, or expire a job past its TTL without starting it.
-- KEYS[1] processing list   KEYS[2] leases zset   KEYS[3] stats hash   KEYS[4] expiry zset
-- KEYS[5] queue list (only its length is read)   KEYS[6] waiting zset
-- KEYS[5+2i] job hash of job i, KEYS[6+2i] result key of job i
-- ARGV[1] lease ms   ARGV[2] worker id   ARGV[3] completion channel
-- ARGV[2+2i] job id of job i, ARGV[3+2i] the lease token the worker chose for it
-- Returns {queue length left, entry per job...}, so the worker knows whether to take
-- more without blocking; an entry is
--   {job_id, "run", token, attempts, max_attempts, expires_at, payload, now, trace_context}
--       (trace_context: the producer's, or nil when the record holds none)
--   {job_id, "corrupt", token, problem, now}: a numeric field of the record does not
--       parse, or its payload is not UTF-8 (the worker could not even decode this
--       reply). The job is held as a run is (running, under a lease, counted
--       started), so the worker can end it with the problem (queue_fail mode "corrupt").
--   {job_id, "expired"} or {job_id, "skip"} (unknown, finished or someone else's)
-- `now` is Redis TIME in ms: the worker times the attempt's deadlines from it, never
-- from its own clock.
-- All-or-nothing: a shared key of another type, a job key that is not a hash, or a
-- `started`/`expired` counter of the stats hash that is not an integer is refused with
-- the error reply "CORRUPT <position in KEYS> <problem>" before the first write (then no
-- job of the call is claimed: they stay in the processing list, where the reaper finds
-- them). A field of one record that does not parse is no refusal: that job is held as
-- "corrupt" above. Nothing after the first write can fail.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_ms = tonumber(ARGV[1])
local n = (#ARGV - 3) / 2
local out = {0}
local started = 0
local expired = 0
-- Jobs that no longer wait (BLMOVE took them off the queue list): out of the waiting set.
local arrived = {}

-- An integer field as Redis stores it (what HINCRBY accepts), or nil.
local function int(value)
    if type(value) == 'string' and #value < 16 and string.find(value, '^%-?%d+$') then
        return tonumber(value)
    end
    return nil
end

-- Is `text` valid UTF-8 (what the worker's client decodes strictly)? ASCII, the usual
-- payload, costs one scan. Otherwise each well-formed sequence (RFC 3629: no overlong
-- forms, no surrogates, nothing past U+10FFFF) is replaced by an ASCII byte, so no
-- pass can join the leftovers of another; any byte >= 0x80 left is malformed.
local UTF8_SEQUENCES = {
    '[\194-\223][\128-\191]',
    '\224[\160-\191][\128-\191]', '[\225-\236][\128-\191][\128-\191]',
    '\237[\128-\159][\128-\191]', '[\238-\239][\128-\191][\128-\191]',
    '\240[\144-\191][\128-\191][\128-\191]',
    '[\241-\243][\128-\191][\128-\191][\128-\191]',
    '\244[\128-\143][\128-\191][\128-\191]',
}
local function utf8(text)
    if not string.find(text, '[\128-\255]') then
        return true
    end
    for _, sequence in ipairs(UTF8_SEQUENCES) do
        text = string.gsub(text, sequence, '.')
    end
    return not string.find(text, '[\128-\255]')
end

-- Why the record cannot run (its first numeric field that does not parse, or a payload
-- the worker could not decode), or nil.
-- f: state, token, expires_at, ttl, attempts, max_attempts, payload, trace_context
local function problem_of(f)
    local checks = {
        {'expires_at', f[3], int(f[3])},
        {'ttl', f[4], int(f[4]) and int(f[4]) > 0},
        {'attempts', f[5], not f[5] or int(f[5])},
        {'max_attempts', f[6], int(f[6]) and int(f[6]) > 0},
    }
    for _, check in ipairs(checks) do
        if not check[3] then
            local raw = check[2]
            local shown = 'missing'
            if type(raw) == 'string' and #raw <= 40 and string.find(raw, '^[%w%p ]*$') then
                shown = "'" .. raw .. "'"
            elseif raw then
                shown = 'unprintable'
            end
            return 'stored field ' .. check[1] .. ' of the job does not parse: ' .. shown
        end
    end
    if type(f[7]) == 'string' and not utf8(f[7]) then
        return 'stored payload of the job is not valid UTF-8'
    end
    return nil
end

-- The record's trace context for the reply, or false (no field; or bytes the worker could
-- not decode, which would lose the whole reply: tracing must never stop a job).
local function trace_context_of(f)
    if type(f[8]) == 'string' and utf8(f[8]) then
        return f[8]
    end
    return false
end

-- A stored value as a problem text shows it (bounded, printable).
local function shown(raw)
    if type(raw) == 'string' and #raw <= 40 and string.find(raw, '^[%w%p ]*$') then
        return "'" .. raw .. "'"
    end
    return raw and 'unprintable' or 'missing'
end
local function failed(reply)
    return type(reply) == 'table' and reply.err ~= nil
end
local function wrong_type(index, expected)
    local found = redis.call('TYPE', KEYS[index]).ok
    return redis.error_reply('CORRUPT ' .. index .. ' holds a ' .. found
        .. ', where the queue keeps a ' .. expected)
end

-- The checks, all reads and cheap: a TYPE per key the writes below touch; the queue
-- list's length (for the reply; this script never writes it) and the two counters are
-- read once, their read doubling as the type check.
for _, key in ipairs({{1, 'list'}, {2, 'zset'}, {4, 'zset'}, {6, 'zset'}}) do
    local found = redis.call('TYPE', KEYS[key[1]]).ok
    if found ~= key[2] and found ~= 'none' then
        return wrong_type(key[1], key[2])
    end
end
local left = redis.pcall('LLEN', KEYS[5])
if failed(left) then
    return wrong_type(5, 'list')
end
local counters = redis.pcall('HMGET', KEYS[3], 'started', 'expired')
if failed(counters) then
    return wrong_type(3, 'hash')
end
for c, field in ipairs({'started', 'expired'}) do
    -- 18 digits at most: adding a batch to it cannot overflow HINCRBY's 64 bits.
    local value = counters[c]
    if value and not (#value <= 18 and string.find(value, '^%-?%d+$')) then
        return redis.error_reply('CORRUPT 3 field ' .. field .. ' is not an integer: '
            .. shown(value))
    end
end
local records = {}
for i = 1, n do
    local f = redis.pcall('HMGET', KEYS[5 + 2 * i], 'state', 'token', 'expires_at', 'ttl',
        'attempts', 'max_attempts', 'payload', 'trace_context')
    if failed(f) then
        return wrong_type(5 + 2 * i, 'hash')
    end
    records[i] = f
end

-- The writes.
local seen = {}
for i = 1, n do
    local job_id = ARGV[2 + 2 * i]
    local token = ARGV[3 + 2 * i]
    local job_key = KEYS[5 + 2 * i]
    local f = records[i]
    local state = f[1]
    if seen[job_id] then
        -- A second entry of a job this call already handled (read before that write):
        -- a stray, as below.
        redis.call('LREM', KEYS[1], 1, job_id)
        out[i + 1] = {job_id, 'skip'}
    elseif state == 'running' and f[2] == token then
        -- A replay of this very claim (the reply was lost): hand the lease back again.
        local problem = problem_of(f)
        if problem then
            out[i + 1] = {job_id, 'corrupt', token, problem, now}
        else
            out[i + 1] = {job_id, 'run', token, f[5], f[6], f[3], f[7], now,
                trace_context_of(f)}
        end
    elseif f[3] and (not state or state == 'queued' or state == 'retrying') then
        -- (a record without a 'state' field is a job queued by enqueue)
        local problem = problem_of(f)
        if problem then
            if not f[5] or int(f[5]) then
                redis.call('HINCRBY', job_key, 'attempts', 1)
            end
            redis.call('HSET', job_key, 'state', 'running', 'token', token,
                'worker', ARGV[2], 'started_at', now)
            redis.call('ZADD', KEYS[2], now + lease_ms, job_id)
            started = started + 1
            arrived[#arrived + 1] = job_id
            out[i + 1] = {job_id, 'corrupt', token, problem, now}
        elseif now >= int(f[3]) then
            local ttl = int(f[4])
            redis.call('LREM', KEYS[1], 1, job_id)
            redis.call('ZREM', KEYS[2], job_id)
            redis.call('ZREM', KEYS[4], job_id)
            redis.call('DEL', job_key)
            redis.call('SET', KEYS[6 + 2 * i],
                '{"status":"expired","result":null,"error":"not started within its ttl of '
                .. ttl .. ' s"}', 'EX', ttl)
            redis.call('PUBLISH', ARGV[3], job_id)
            expired = expired + 1
            arrived[#arrived + 1] = job_id
            out[i + 1] = {job_id, 'expired'}
        else
            local attempts = redis.call('HINCRBY', job_key, 'attempts', 1)
            redis.call('HSET', job_key, 'state', 'running', 'token', token,
                'worker', ARGV[2], 'started_at', now)
            redis.call('ZADD', KEYS[2], now + lease_ms, job_id)
            started = started + 1
            arrived[#arrived + 1] = job_id
            out[i + 1] = {job_id, 'run', token, attempts, f[6], f[3], f[7], now,
                trace_context_of(f)}
        end
    else
        -- Not claimable (gone, finished, or a stray second entry of a running job):
        -- drop this processing entry only, count nothing. The usual stray is the entry
        -- of a job expired while it waited: expiry leaves it on the queue list.
        redis.call('LREM', KEYS[1], 1, job_id)
        if not f[3] then
            arrived[#arrived + 1] = job_id  -- its record is gone: it waits for nothing
        end
        out[i + 1] = {job_id, 'skip'}
    end
    seen[job_id] = true
end
if #arrived > 0 then
    redis.call('ZREM', KEYS[6], unpack(arrived))
end
if started > 0 then
    redis.call('HINCRBY', KEYS[3], 'started', started)
end
if expired > 0 then
    redis.call('HINCRBY', KEYS[3], 'expired', expired)
end
out[1] = left
return out
