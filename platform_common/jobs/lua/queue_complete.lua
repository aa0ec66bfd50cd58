-- Complete a job successfully, fenced by its lease token: store the result with the
-- job's TTL, record the three histograms, then publish the completion event.
-- KEYS[1] processing list  KEYS[2] leases zset  KEYS[3] expiry zset  KEYS[4] stats hash
-- KEYS[5] job hash         KEYS[6] result key
-- ARGV[1] job id  ARGV[2] lease token  ARGV[3] result JSON (already encoded)
-- ARGV[4] completion channel  ARGV[5] the latency histogram's +Inf bucket field
-- ARGV[6..] pairs (upper bound in seconds, latency bucket field), bounds ascending
-- The histograms (stats fields <name>_le:<bound>, <name>_sum, <name>_count; the wait and
-- run ones use the latency bounds, in fields named alike: latency_le:0.5 -> wait_le:0.5):
--   latency  enqueued_at -> now: the job's whole life, retries and backoffs included
--   wait     the succeeding attempt's becoming due (due_at of its retry, else
--            enqueued_at) -> its started_at: time spent waiting for a worker
--   run      started_at -> now: the succeeding attempt in the handler
-- Returns {"ok"}, {"replay"} (this completion already happened) or {"lost", state}
-- A key of another type, a job field (enqueued_at, ttl, started_at, due_at) or a stats
-- field this call bumps that does not parse is refused with the error reply
-- "CORRUPT <position in KEYS> <problem>" before the first write: the worker then fails
-- the job with that problem.
local job_id = ARGV[1]
local f = redis.call('HMGET', KEYS[5], 'state', 'token', 'enqueued_at', 'ttl', 'started_at',
    'due_at')
local state = f[1]
if f[2] ~= ARGV[2] then
    return {'lost', state or 'missing'}
end
if state ~= 'running' then
    if state == 'succeeded' then
        return {'replay'}
    end
    return {'lost', state or 'missing'}
end

-- An integer as Redis stores one (what HINCRBY and EXPIRE accept), at most `digits`
-- long, or nil.
local function int(value, digits)
    if type(value) == 'string' and #value <= digits and string.find(value, '^%-?%d+$') then
        return tonumber(value)
    end
    return nil
end
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
local function shown(raw)
    if type(raw) == 'string' and #raw <= 40 and string.find(raw, '^[%w%p ]*$') then
        return "'" .. raw .. "'"
    end
    return raw and 'unprintable' or 'missing'
end
local function corrupt(index, problem)
    return redis.error_reply('CORRUPT ' .. index .. ' ' .. problem)
end

local enqueued_at = int(f[3], 15)
if not enqueued_at then
    return corrupt(5, 'field enqueued_at of the job does not parse: ' .. shown(f[3]))
end
-- 15 digits: SET EX and EXPIRE take the text as it is, and its ms fit in 64 bits.
local ttl = int(f[4], 15)
if not ttl or ttl <= 0 then
    return corrupt(5, 'field ttl of the job does not parse: ' .. shown(f[4]))
end
for index, kind in ipairs({'list', 'zset', 'zset', 'hash'}) do
    local found = redis.call('TYPE', KEYS[index]).ok
    if found ~= kind and found ~= 'none' then
        return corrupt(index, 'holds a ' .. found .. ', where the queue keeps a ' .. kind)
    end
end

local started_at = int(f[5], 15)
if not started_at then
    return corrupt(5, 'field started_at of the job does not parse: ' .. shown(f[5]))
end
local due_at = enqueued_at
if f[6] then  -- written when a failed attempt was scheduled for a retry
    due_at = int(f[6], 15)
    if not due_at then
        return corrupt(5, 'field due_at of the job does not parse: ' .. shown(f[6]))
    end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Seconds between two ms timestamps; never negative (a clock step, a hand-edited field).
local function seconds(from_ms, to_ms)
    return math.max(0, to_ms - from_ms) / 1000
end
local function bucket_of(value)
    for i = 6, #ARGV - 1, 2 do
        if value <= tonumber(ARGV[i]) then
            return ARGV[i + 1]
        end
    end
    return ARGV[5]
end
-- {name, observed seconds, bucket field}; the bucket field is the latency one renamed.
local observed = {
    {'latency', seconds(enqueued_at, now)},
    {'wait', seconds(due_at, started_at)},
    {'run', seconds(started_at, now)},
}
-- The fields this call bumps, all checked so that no HINCRBY fails halfway.
local counters = {'completed'}
local sums = {}
for _, histogram in ipairs(observed) do
    local name = histogram[1]
    histogram[3] = name .. string.sub(bucket_of(histogram[2]), #'latency' + 1)
    counters[#counters + 1] = name .. '_count'
    counters[#counters + 1] = histogram[3]
    sums[#sums + 1] = name .. '_sum'
end
local read = {unpack(counters)}
for _, field in ipairs(sums) do
    read[#read + 1] = field
end
local stats = redis.call('HMGET', KEYS[4], unpack(read))
for i, field in ipairs(counters) do
    if stats[i] and not int(stats[i], 18) then
        return corrupt(4, 'field ' .. field .. ' is not an integer: ' .. shown(stats[i]))
    end
end
for i, field in ipairs(sums) do
    local value = stats[#counters + i]
    if value and not float(value) then
        return corrupt(4, 'field ' .. field .. ' is not a number: ' .. shown(value))
    end
end

redis.call('SET', KEYS[6], '{"status":"succeeded","result":' .. ARGV[3] .. ',"error":null}',
    'EX', f[4])
redis.call('HSET', KEYS[5], 'state', 'succeeded', 'finished_at', now)
redis.call('EXPIRE', KEYS[5], f[4])
redis.call('LREM', KEYS[1], 1, job_id)
redis.call('ZREM', KEYS[2], job_id)
redis.call('ZREM', KEYS[3], job_id)
redis.call('HINCRBY', KEYS[4], 'completed', 1)
for _, histogram in ipairs(observed) do
    redis.call('HINCRBY', KEYS[4], histogram[1] .. '_count', 1)
    redis.call('HINCRBYFLOAT', KEYS[4], histogram[1] .. '_sum', histogram[2])
    redis.call('HINCRBY', KEYS[4], histogram[3], 1)
end
redis.call('PUBLISH', ARGV[4], job_id)
return {'ok'}
