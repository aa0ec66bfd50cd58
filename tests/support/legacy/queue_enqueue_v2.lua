-- Enqueue a batch of jobs of one agent type, all or nothing.
-- KEYS[1] queue list   KEYS[2] stats hash   KEYS[3] queued hash   KEYS[4] expiring zset
-- KEYS[5] arrivals zset   KEYS[6] arrived hash
-- KEYS[4+3i] job hash of job i, KEYS[5+3i] its result key, KEYS[6+3i] its expiry bucket
--           list (keys.py QueueKeys.expiring_bucket of its deadline)
-- ARGV[1]   nonce: identifies this call, so a call retried after a lost reply is
--           recognised as its own replay instead of a duplicate
-- ARGV[2]   n, the number of jobs
-- ARGV[3]   the latest created_at (ms) of the whole enqueue_many batch, so every chunk
--           of a batch refuses a created_at too far ahead together
-- ARGV[4]   how far (ms) a created_at may lie ahead of Redis TIME
-- ARGV[5]   the expiry bucket width (ms)   ARGV[6] the arrival bucket width (ms)
-- then 5 arguments per job i (base = 6 + 5*(i-1)):
--           job_id, payload JSON, ttl seconds, created_at ms, max attempts
-- ARGV[7+5n] optional: the trace context of every job of the call (a JSON object of
--           propagation headers), kept with the job; absent or "" keeps none
-- A job is written packed into one field of the queued hash (queue/envelope.py):
--   <enqueued_at>,<expires_at>,<ttl>,<max_attempts>,<nonce>\n<trace context>\n<payload>
-- plus its id on the queue list and in its expiry bucket, and a count in its arrival
-- second: no key of its own until a worker claims it.
-- Returns {"ok", written}, {"duplicate", job_id...} (an id is taken while it waits, or its
-- record or its result exists: a new job must never read an old job's outcome) or
-- {"ahead", now} (ARGV[3] lies more than ARGV[4] ahead of `now`, Redis TIME in ms); both
-- write nothing.
-- A key of another type or a stats counter that is not an integer is refused with the
-- error reply "CORRUPT <position in KEYS> <problem>" before the first write.
local nonce = ARGV[1]
local n = tonumber(ARGV[2])
local trace_context = ARGV[7 + 5 * n] or ''
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(ARGV[3]) - now > tonumber(ARGV[4]) then
    return {'ahead', now}
end

local function expect(index, kind)
    local found = redis.call('TYPE', KEYS[index]).ok
    if found ~= kind and found ~= 'none' then
        return 'CORRUPT ' .. index .. ' holds a ' .. found .. ', where the queue keeps a ' .. kind
    end
    return nil
end
local ids = {}
local job_keys = {}
for i = 1, n do
    ids[i] = ARGV[7 + 5 * (i - 1)]
    job_keys[2 * i - 1] = KEYS[4 + 3 * i]
    job_keys[2 * i] = KEYS[5 + 3 * i]
end
-- A waiting job of this id: ours (same nonce, our own replay) or a duplicate. The read
-- doubles as the type check of the queued hash (a TYPE call each costs as much).
local waiting = redis.pcall('HMGET', KEYS[3], unpack(ids))
if waiting.err then
    return redis.error_reply(expect(3, 'hash'))
end
-- One EXISTS over every job and result key: in the usual case none exists, and the
-- per-job look (duplicate, or our own replay already claimed?) is skipped.
local existing = redis.call('EXISTS', unpack(job_keys))
local duplicates = {}
local replayed = {}
local any_replayed = false
for i = 1, n do
    local packed = waiting[i]
    if packed then
        local header = string.match(packed, '^[^\n]*')
        if string.match(header, '^%d+,%d+,%d+,%d+,(.*)$') == nonce then
            replayed[i] = true
        else
            duplicates[#duplicates + 1] = ids[i]
        end
    elseif existing > 0 then
        local job_key = KEYS[4 + 3 * i]
        if redis.call('EXISTS', job_key) == 1 then
            local kind = redis.call('TYPE', job_key).ok
            if kind ~= 'hash' then
                return redis.error_reply('CORRUPT ' .. (4 + 3 * i) .. ' holds a ' .. kind
                    .. ', where the queue keeps a hash')
            end
            if redis.call('HGET', job_key, 'nonce') == nonce then
                replayed[i] = true
            else
                duplicates[#duplicates + 1] = ids[i]
            end
        elseif redis.call('EXISTS', KEYS[5 + 3 * i]) == 1 then
            duplicates[#duplicates + 1] = ids[i]
        end
    end
    any_replayed = any_replayed or replayed[i] == true
end
if #duplicates > 0 then
    return {'duplicate', unpack(duplicates)}
end

-- One HSET, one LPUSH and one RPUSH per expiry bucket for the whole batch: a redis.call
-- per job costs more than the command itself. unpack() is bounded by Lua's C stack
-- (about 8,000 values), far above the 2 x 500 of a full chunk (producer.ENQUEUE_CHUNK).
-- LPUSH a b c pushes in order, exactly as three LPUSHes would. Everything is computed
-- before the first write.
-- The usual call puts every job into one expiry bucket (one job, or a batch of one TTL
-- created within seconds): `pushed` then serves its RPUSH too, and the per-bucket
-- tables below are made only for a call whose jobs fall into several buckets. Each
-- table costs about as much as a command here.
local bucket_ms = tonumber(ARGV[5])
local packed = {}
local pushed = any_replayed and {} or ids
local first = nil       -- position in KEYS of the first written job's bucket
local first_start = nil -- its start (ms): its key names it, so every job in it agrees
local spread = false    -- some written job's bucket is not the first's
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
        packed[#packed + 1] = ids[i]
        packed[#packed + 1] = string.format('%d,%d,%d,%d,', now, expires_at, ttl, attempts)
            .. nonce .. '\n' .. trace_context .. '\n' .. ARGV[base + 2]
        if any_replayed then
            pushed[#pushed + 1] = ids[i]
        end
        if not first then
            first, first_start = 6 + 3 * i, expires_at - expires_at % bucket_ms
        elseif not spread and KEYS[6 + 3 * i] ~= KEYS[first] then
            spread = true
        end
    end
end
local written = #pushed
if written == 0 then
    return {'ok', 0}
end
-- The buckets of the call, in first-seen order: {position in KEYS, start, ids}.
local buckets = {{first, first_start, pushed}}
if spread then
    buckets = {}
    local by_key = {}
    for i = 1, n do
        if not replayed[i] then
            local position = 6 + 3 * i
            local bucket = by_key[KEYS[position]]
            if not bucket then
                local base = 6 + 5 * (i - 1)
                local expires_at = tonumber(ARGV[base + 4]) + tonumber(ARGV[base + 3]) * 1000
                bucket = {position, expires_at - expires_at % bucket_ms, {}}
                by_key[KEYS[position]] = bucket
                buckets[#buckets + 1] = bucket
            end
            bucket[3][#bucket[3] + 1] = ids[i]
        end
    end
end
-- The type checks, a TYPE call each, only of what this call writes: a bucket that exists
-- is registered in the expiring set already, and a second that has a count is in the
-- arrivals set (the scripts that drop one drop the other), so the usual call, into a
-- bucket and a second of earlier jobs, writes neither set and checks neither.
local problem = expect(1, 'list')
local new_bucket = false
for b = 1, #buckets do
    local bucket = buckets[b]
    local found = redis.call('TYPE', KEYS[bucket[1]]).ok
    if found == 'none' then
        bucket[4] = true  -- new: registered in the expiring set once written
        new_bucket = true
    elseif found ~= 'list' and not problem then
        problem = 'CORRUPT ' .. bucket[1] .. ' holds a ' .. found
            .. ', where the queue keeps a list'
    end
end
if new_bucket then
    problem = problem or expect(4, 'zset')
end
if problem then
    return redis.error_reply(problem)
end
local second = now - now % tonumber(ARGV[6])
local count = redis.pcall('HGET', KEYS[6], second)  -- its read doubles as the type check
if type(count) == 'table' then
    return redis.error_reply(expect(6, 'hash'))
end
-- HINCRBY takes only Redis' own integer text: no leading zero, no "-0" ("007" would
-- pass a plain digits check and then fail the HINCRBY below, after the first write).
if count and not (#count <= 18 and (count == '0' or string.find(count, '^%-?[1-9]%d*$'))) then
    return redis.error_reply('CORRUPT 6 field ' .. second .. ' is not an integer')
end
if not count then
    problem = expect(5, 'zset')
    if problem then
        return redis.error_reply(problem)
    end
end
-- The one write that can still fail on a value (a counter that is not an integer, a
-- stats key of another type) goes first: failing, it leaves nothing written.
local counted = redis.pcall('HINCRBY', KEYS[2], 'enqueued', written)
if type(counted) == 'table' then
    if string.sub(counted.err, 1, 4) == 'OOM ' then
        return counted
    end
    return redis.error_reply('CORRUPT 2 field enqueued: ' .. counted.err)
end
redis.call('HINCRBY', KEYS[6], second, written)
if not count then
    redis.call('ZADD', KEYS[5], second, second)
end
redis.call('HSET', KEYS[3], unpack(packed))
for b = 1, #buckets do
    local bucket = buckets[b]
    redis.call('RPUSH', KEYS[bucket[1]], unpack(bucket[3]))
    if bucket[4] then
        redis.call('ZADD', KEYS[4], bucket[2], bucket[2])
    end
end
redis.call('LPUSH', KEYS[1], unpack(pushed))
return {'ok', written}
