-- Enqueue a batch of jobs of one agent type, all or nothing.
-- KEYS[1]   queue list            KEYS[2] stats hash      KEYS[3] expiry zset
-- KEYS[4]   waiting zset (job id -> when it entered the queue list)
-- KEYS[4+i] job hash of job i
-- ARGV[1]   nonce: identifies this call, so a call retried after a lost reply is
--           recognised as its own replay instead of a duplicate
-- ARGV[2]   n, the number of jobs; then 5 arguments per job i (base = 2 + 5*(i-1)):
--           job_id, payload JSON, ttl seconds, created_at ms, max attempts
-- Returns {"ok", written} or {"duplicate", job_id...}: a duplicate writes nothing.
local nonce = ARGV[1]
local n = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local duplicates = {}
local replayed = {}
-- One EXISTS over every job key first: in the usual case none exists, and the
-- per-job look (duplicate or our own replay?) is skipped.
local existing = redis.call('EXISTS', unpack(KEYS, 5, 4 + n))
for i = 1, (existing > 0 and n or 0) do
    local job_key = KEYS[4 + i]
    if redis.call('EXISTS', job_key) == 1 then
        if redis.call('HGET', job_key, 'nonce') == nonce then
            replayed[i] = true
        else
            duplicates[#duplicates + 1] = ARGV[3 + 5 * (i - 1)]
        end
    end
end
if #duplicates > 0 then
    return {'duplicate', unpack(duplicates)}
end

-- One ZADD per set and one LPUSH for the whole batch: a redis.call per job costs more than
-- the command itself. unpack() is bounded by Lua's C stack (about 8,000 values), far
-- above the 2 x 500 of a full chunk (producer.ENQUEUE_CHUNK). LPUSH a b c pushes in
-- order, exactly as three LPUSHes would.
local expiries = {}
local arrivals = {}
local ids = {}
for i = 1, n do
    if not replayed[i] then
        local base = 2 + 5 * (i - 1)
        local job_id = ARGV[base + 1]
        local ttl = tonumber(ARGV[base + 3])
        local expires_at = tonumber(ARGV[base + 4]) + ttl * 1000
        -- The hot path writes only what later steps need: no 'state' field means
        -- queued, no 'attempts' field means none yet (created_at is in the payload).
        redis.call('HSET', KEYS[4 + i], 'payload', ARGV[base + 2], 'enqueued_at', now,
            'expires_at', expires_at, 'ttl', ttl, 'max_attempts', ARGV[base + 5], 'nonce', nonce)
        expiries[#expiries + 1] = expires_at
        expiries[#expiries + 1] = job_id
        arrivals[#arrivals + 1] = now
        arrivals[#arrivals + 1] = job_id
        ids[#ids + 1] = job_id
    end
end
local written = #ids
if written > 0 then
    redis.call('ZADD', KEYS[3], unpack(expiries))
    redis.call('ZADD', KEYS[4], unpack(arrivals))
    redis.call('LPUSH', KEYS[1], unpack(ids))
    redis.call('HINCRBY', KEYS[2], 'enqueued', written)
end
return {'ok', written}
