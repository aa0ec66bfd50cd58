-- Enqueue a batch of jobs of one agent type, all or nothing.
-- KEYS[1]   queue list            KEYS[2] stats hash      KEYS[3] expiry zset
-- KEYS[4]   waiting zset (job id -> when it entered the queue list)
-- KEYS[3+2i] job hash of job i, KEYS[4+2i] result key of job i
-- ARGV[1]   nonce: identifies this call, so a call retried after a lost reply is
--           recognised as its own replay instead of a duplicate
-- ARGV[2]   n, the number of jobs
-- ARGV[3]   the latest created_at (ms) of the whole enqueue_many batch, so every chunk
--           of a batch refuses a created_at too far ahead together
-- ARGV[4]   how far (ms) a created_at may lie ahead of Redis TIME
-- then 5 arguments per job i (base = 4 + 5*(i-1)):
--           job_id, payload JSON, ttl seconds, created_at ms, max attempts
-- ARGV[5+5n] optional: the trace context of every job of the call (a JSON object of
--           propagation headers), kept in the record's `trace_context` field; absent
--           or "" writes no field
-- Returns {"ok", written}, {"duplicate", job_id...} (an id is taken while its record or
-- its result exists: a new job must never read an old job's outcome) or {"ahead", now}
-- (ARGV[3] lies more than ARGV[4] ahead of `now`, Redis TIME in ms); both write nothing.
-- A key of another type or a stats counter that is not an integer is refused with the
-- error reply "CORRUPT <position in KEYS> <problem>" before the first write.
local nonce = ARGV[1]
local n = tonumber(ARGV[2])
local trace_context = ARGV[5 + 5 * n]
if trace_context == '' then
    trace_context = nil
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(ARGV[3]) - now > tonumber(ARGV[4]) then
    return {'ahead', now}
end

local duplicates = {}
local replayed = {}
-- One EXISTS over every job and result key first: in the usual case none exists, and
-- the per-job look (duplicate or our own replay?) is skipped.
local existing = redis.call('EXISTS', unpack(KEYS, 5, 4 + 2 * n))
for i = 1, (existing > 0 and n or 0) do
    local job_key = KEYS[3 + 2 * i]
    if redis.call('EXISTS', job_key) == 1 then
        local kind = redis.call('TYPE', job_key).ok
        if kind ~= 'hash' then
            return redis.error_reply('CORRUPT ' .. (3 + 2 * i) .. ' holds a ' .. kind
                .. ', where the queue keeps a hash')
        end
        if redis.call('HGET', job_key, 'nonce') == nonce then
            replayed[i] = true
        else
            duplicates[#duplicates + 1] = ARGV[5 + 5 * (i - 1)]
        end
    elseif redis.call('EXISTS', KEYS[4 + 2 * i]) == 1 then
        duplicates[#duplicates + 1] = ARGV[5 + 5 * (i - 1)]
    end
end
if #duplicates > 0 then
    return {'duplicate', unpack(duplicates)}
end

-- One ZADD per set and one LPUSH for the whole batch: a redis.call per job costs more than
-- the command itself. unpack() is bounded by Lua's C stack (about 8,000 values), far
-- above the 2 x 500 of a full chunk (producer.ENQUEUE_CHUNK). LPUSH a b c pushes in
-- order, exactly as three LPUSHes would. Everything is computed before the first write.
local expiries = {}
local arrivals = {}
local ids = {}
local pending = {}  -- the positions i of the jobs to write
for i = 1, n do
    if not replayed[i] then
        local base = 4 + 5 * (i - 1)
        local ttl = tonumber(ARGV[base + 3])
        local created = tonumber(ARGV[base + 4])
        if not ttl or not created then
            return redis.error_reply('ERR queue_enqueue: job ' .. i .. ' has no numeric ttl'
                .. ' or created_at argument')
        end
        -- Both are integers bounded by validation (TTL, clock skew): the sum stays far
        -- below 2^53 and is written in integer digits.
        local expires_at = created + ttl * 1000
        expiries[#expiries + 1] = expires_at
        expiries[#expiries + 1] = ARGV[base + 1]
        arrivals[#arrivals + 1] = now
        arrivals[#arrivals + 1] = ARGV[base + 1]
        ids[#ids + 1] = ARGV[base + 1]
        pending[#pending + 1] = i
    end
end
local written = #ids
if written == 0 then
    return {'ok', 0}
end

local function expect(index, kind)
    local found = redis.call('TYPE', KEYS[index]).ok
    if found ~= kind and found ~= 'none' then
        return 'CORRUPT ' .. index .. ' holds a ' .. found .. ', where the queue keeps a ' .. kind
    end
    return nil
end
local problem = expect(1, 'list') or expect(3, 'zset') or expect(4, 'zset')
if problem then
    return redis.error_reply(problem)
end
-- The one write that can still fail on a value (a counter that is not an integer, a
-- stats key of another type) goes first: failing, it leaves nothing written.
local counted = redis.pcall('HINCRBY', KEYS[2], 'enqueued', written)
if type(counted) == 'table' and counted.err then
    if string.sub(counted.err, 1, 4) == 'OOM ' then
        return counted
    end
    return redis.error_reply('CORRUPT 2 field enqueued: ' .. counted.err)
end
for k, i in ipairs(pending) do
    local base = 4 + 5 * (i - 1)
    -- The hot path writes only what later steps need: no 'state' field means
    -- queued, no 'attempts' field means none yet (created_at is in the payload).
    redis.call('HSET', KEYS[3 + 2 * i], 'payload', ARGV[base + 2], 'enqueued_at', now,
        'expires_at', expiries[2 * k - 1], 'ttl', ARGV[base + 3],
        'max_attempts', ARGV[base + 5], 'nonce', nonce)
    if trace_context then
        redis.call('HSET', KEYS[3 + 2 * i], 'trace_context', trace_context)
    end
end
redis.call('ZADD', KEYS[3], unpack(expiries))
redis.call('ZADD', KEYS[4], unpack(arrivals))
redis.call('LPUSH', KEYS[1], unpack(ids))
return {'ok', written}
