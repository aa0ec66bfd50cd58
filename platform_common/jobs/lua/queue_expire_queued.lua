-- Expire the jobs of one expiry bucket that still wait packed in the queued hash
-- (enqueued, never claimed): the bucket is wholly past, so each of them is past its TTL.
-- An id no longer in the queued hash (claimed since, or expired by a claim) is skipped:
-- the bucket only ever loses entries here. Safe to run from many workers at once.
-- KEYS[1] expiring zset   KEYS[2] the bucket list   KEYS[3] queued hash   KEYS[4] stats hash
-- KEYS[5] arrivals zset   KEYS[6] arrived hash   KEYS[6+i] result key of job i
-- ARGV[1] completion channel   ARGV[2] the bucket's start (ms)   ARGV[3] bucket width (ms)
-- ARGV[4] arrival bucket width (ms)   ARGV[5] seconds to keep the result of a job whose
-- packed value does not parse   ARGV[5+i] job id i: the first entries of the bucket list,
-- as the caller read them
-- KEYS[7+n] high list, KEYS[8+n] low list (optional, both or neither; n the number of
-- job ids): Levels, a high or low job expired here also leaves its level's list, so
-- that list's length stays its level's depth (the queue list keeps its stale entries:
-- see queue_expire_tail.lua). Its entry is found from the tail, where the oldest wait.
-- Returns {"later"} (the bucket is not wholly past by Redis TIME), {"moved"} (the list's
-- head is no longer what the caller read: another worker took it; read again), or
-- {{expired job id...}, {trace context...}, {job id, problem}...}: the jobs expired (each
-- counted, its result stored, published), the trace context each carries ('' if none:
-- for its log line), then those whose packed value did not parse (expired all the same).
-- All-or-nothing: a key of another type or a counter that is not an integer is refused
-- with the error reply "CORRUPT <position in KEYS> <problem>" before the first write.
-- @include time
-- @include arrivals
-- @include packed_header
-- @include levels
local now = now_ms()
local start = tonumber(ARGV[2])
if start + tonumber(ARGV[3]) > now then
    return {'later'}
end
local arrival_ms = tonumber(ARGV[4])
local fallback_ttl = ARGV[5]
local n = #ARGV - 5

local typed = {{1, 'zset'}, {2, 'list'}, {3, 'hash'}, {4, 'hash'}, {5, 'zset'}, {6, 'hash'}}
local high_list, low_list = KEYS[7 + n], KEYS[8 + n]  -- Levels (optional)
if low_list then
    typed[#typed + 1] = {7 + n, 'list'}
    typed[#typed + 1] = {8 + n, 'list'}
end
local refusal = wrong_types(typed)
if refusal then
    return refusal
end
local ids = {unpack(ARGV, 6, 5 + n)}
local head = n > 0 and redis.call('LRANGE', KEYS[2], 0, n - 1) or {}
if #head ~= n then
    return {'moved'}
end
for i = 1, n do
    if head[i] ~= ids[i] then
        return {'moved'}
    end
end
refusal = count_refusal(4, 'expired')
if refusal then
    return refusal
end

local packed = n > 0 and redis.call('HMGET', KEYS[3], unpack(ids)) or {}
local expired = {}
local traces = {}
local out = {expired, traces}  -- the reply, then {job id, problem} per value unparsed
local results = {}  -- i -> {result JSON, ttl}
local leaving = arrival_tally()  -- the jobs expired here
local seen = {}
local leveled = {}  -- Levels: {list, id} of each expired high or low job
for i = 1, n do
    local value = packed[i]
    if value and not seen[ids[i]] then
        seen[ids[i]] = true
        local job, enq = unpack_packed(value)
        local ttl = job and job[3]
        -- The ttl goes to SET EX as it is, which refuses a leading zero ("060") as well
        -- as 0: either is a problem here, not a failure after the first write.
        if not job or #ttl > 9 or not string.find(ttl, '^[1-9]') then
            local problem = 'stored packed job does not parse (queue/envelope.py)'
            out[#out + 1] = {ids[i], problem}
            results[i] = {'{"status":"expired","result":null,"error":"expired; ' .. problem
                .. '"}', fallback_ttl}
        else
            results[i] = {'{"status":"expired","result":null,"error":"not started within its'
                .. ' ttl of ' .. ttl .. ' s"}', ttl}
        end
        expired[#expired + 1] = ids[i]
        traces[#traces + 1] = job and job[6] or ''
        if job and job.level and low_list then
            local priority = job.level == 'h' and 'high' or 'low'
            leveled[#leveled + 1] = {level_list(priority, nil, high_list, low_list), ids[i]}
        end
        arrival_leaves(leaving, job and job[1] or enq, arrival_ms)
    end
end
refusal = arrivals_refusal(leaving, 6)
if refusal then
    return refusal
end

-- The writes: nothing below can fail.
if #expired > 0 then
    redis.call('HINCRBY', KEYS[4], 'expired', #expired)
    redis.call('HDEL', KEYS[3], unpack(expired))
    for i = 1, n do
        if results[i] then
            redis.call('SET', KEYS[6 + i], results[i][1], 'EX', results[i][2])
            redis.call('PUBLISH', ARGV[1], ids[i])
        end
    end
end
arrivals_leave(leaving, 6, 5)
for _, entry in ipairs(leveled) do
    redis.call('LREM', entry[1], -1, entry[2])
end
if n > 0 then
    redis.call('LTRIM', KEYS[2], n, -1)
end
if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('ZREM', KEYS[1], start)
end
return out
