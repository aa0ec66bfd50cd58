-- Claim jobs a worker has just moved into the processing list: start an attempt
-- under a lease, or expire a job past its TTL without starting it.
-- KEYS[1] processing list   KEYS[2] leases zset   KEYS[3] stats hash   KEYS[4] expiry zset
-- KEYS[5] queue list (only its length is read)   KEYS[6] waiting zset
-- KEYS[5+2i] job hash of job i, KEYS[6+2i] result key of job i
-- ARGV[1] lease ms   ARGV[2] worker id   ARGV[3] completion channel
-- ARGV[2+2i] job id of job i, ARGV[3+2i] the lease token the worker chose for it
-- Returns {queue length left, entry per job...}, so the worker knows whether to take
-- more without blocking; an entry is
--   {job_id, "run", token, attempts, max_attempts, expires_at, payload, now}
--   {job_id, "corrupt", token, problem, now}: a numeric field of the record does not
--       parse, or its payload is not UTF-8 (the worker could not even decode this
--       reply). The job is held as a run is (running, under a lease, counted
--       started), so the worker can end it with the problem (queue_fail mode "corrupt").
--   {job_id, "expired"} or {job_id, "skip"} (unknown, finished or someone else's)
-- `now` is Redis TIME in ms: the worker times the attempt's deadlines from it, never
-- from its own clock.
-- Every field is checked before the job's first write and nothing after a write can
-- raise, so a bad record never leaves a claim half done.
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
-- f: state, token, expires_at, ttl, attempts, max_attempts, payload
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

for i = 1, n do
    local job_id = ARGV[2 + 2 * i]
    local token = ARGV[3 + 2 * i]
    local job_key = KEYS[5 + 2 * i]
    local f = redis.call('HMGET', job_key, 'state', 'token', 'expires_at', 'ttl', 'attempts',
        'max_attempts', 'payload')
    local state = f[1]
    if state == 'running' and f[2] == token then
        -- A replay of this very claim (the reply was lost): hand the lease back again.
        local problem = problem_of(f)
        if problem then
            out[i + 1] = {job_id, 'corrupt', token, problem, now}
        else
            out[i + 1] = {job_id, 'run', token, f[5], f[6], f[3], f[7], now}
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
            out[i + 1] = {job_id, 'run', token, attempts, f[6], f[3], f[7], now}
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
out[1] = redis.call('LLEN', KEYS[5])
return out
