-- Cancel jobs of one agent type (queue/cancel.py). A job that waits (packed in the queued
-- hash, or a job hash in the waiting or delayed set) is cancelled here and never starts:
-- its record goes, its result says cancelled with the reason, its id is published, as
-- expiry does (the stale id left on the queue list is dropped by the claim when met). A
-- running job is asked to stop: the reason goes into the type's cancels hash (job id ->
-- reason) and an entry {job: id, reason: reason} onto the type's control stream, which
-- the workers read; whatever its handler
-- does next, the complete, fail and reaper scripts end it cancelled.
-- KEYS[1] queued hash   KEYS[2] waiting zset   KEYS[3] delayed zset   KEYS[4] expiry zset
-- KEYS[5] stats hash    KEYS[6] arrivals zset  KEYS[7] arrived hash   KEYS[8] control stream
-- KEYS[9] cancels hash
-- KEYS[8+2i] job hash of job i, KEYS[9+2i] its result key (i = 1..n)
-- ARGV[1] completion channel   ARGV[2] the reason (text, may be empty)
-- ARGV[3] arrival bucket width (ms)   ARGV[4] the control stream's cap (XADD MAXLEN ~)
-- ARGV[5] seconds to keep the result of a job whose stored ttl does not parse
-- ARGV[5+i] job id of job i
-- Returns one entry per job, in order: {id, "cancelled"} (it waited: it never starts),
-- {id, "cancelling"} (it runs: its worker is told; asked before already: the same,
-- nothing written again), {id, "finished", state} (it had ended: succeeded, failed,
-- dead, expired, cancelled) or {id, "unknown"}.
-- All-or-nothing: a key of another type, a job whose stored state is unknown, or a count
-- (stats `cancelled`, an arrival second) that is not an integer is refused with the
-- error reply "CORRUPT <position in KEYS> <problem>" before the first write.
-- @include arrivals
-- @include packed_header
local n = (#KEYS - 9) / 2
local reason = ARGV[2]
local arrival_ms = tonumber(ARGV[3])
local fallback_ttl = ARGV[5]
local LIVE = {queued = true, retrying = true}
local ENDED = {succeeded = true, failed = true, dead = true, cancelled = true}

local typed = {{1, 'hash'}, {2, 'zset'}, {3, 'zset'}, {4, 'zset'}, {5, 'hash'}, {6, 'zset'},
    {7, 'hash'}, {8, 'stream'}, {9, 'hash'}}
local refusal = wrong_types(typed)
if refusal then
    return refusal
end
local ids = {unpack(ARGV, 6, 5 + n)}
local packed = n > 0 and redis.call('HMGET', KEYS[1], unpack(ids)) or {}

-- The plan, judged before the first write.
local out = {}
local unpacked = {}  -- ids leaving the queued hash
local dropped = {}   -- ids whose job hash goes (waiting or delayed)
local results = {}   -- {i, ttl}: jobs cancelled here
local requested = {} -- i of running jobs to ask
local leaving = arrival_tally()  -- the packed jobs cancelled here
local seen = {}
-- A ttl SET EX accepts as stored (no leading zero, no sign), else the fallback.
local function ttl_or_fallback(value)
    if value and #value <= 9 and string.find(value, '^[1-9]%d*$') then
        return value
    end
    return fallback_ttl
end
for i = 1, n do
    local job_id = ids[i]
    local job_key, result_key = 8 + 2 * i, 9 + 2 * i
    if seen[job_id] then
        out[i] = seen[job_id]
    elseif packed[i] then
        local job, enq = unpack_packed(packed[i])
        arrival_leaves(leaving, job and job[1] or enq, arrival_ms)
        unpacked[#unpacked + 1] = job_id
        results[#results + 1] = {i, ttl_or_fallback(job and job[3])}
        out[i] = {job_id, 'cancelled'}
    else
        local f = redis.pcall('HMGET', KEYS[job_key], 'state', 'expires_at', 'ttl')
        if failed(f) then
            return wrong_type(job_key, 'hash') or f
        end
        local state = f[1] or (f[2] and 'queued') or nil
        if not state and redis.call('EXISTS', KEYS[job_key]) == 1 then
            state = 'queued'  -- a hash without state or deadline: enqueue writes no state
        end
        if not state then
            local head = redis.pcall('GETRANGE', KEYS[result_key], 0, 40)
            if failed(head) then
                return wrong_type(result_key, 'string') or head
            end
            local status = string.match(head, '^{"status":"(%a+)"')
            out[i] = status and {job_id, 'finished', status} or {job_id, 'unknown'}
        elseif LIVE[state] then
            dropped[#dropped + 1] = job_id
            results[#results + 1] = {i, ttl_or_fallback(f[3])}
            out[i] = {job_id, 'cancelled'}
        elseif state == 'running' then
            if redis.call('HEXISTS', KEYS[9], job_id) == 0 then
                requested[#requested + 1] = i
            end
            out[i] = {job_id, 'cancelling'}
        elseif ENDED[state] then
            out[i] = {job_id, 'finished', state}
        else
            return corrupt(job_key, 'stored state of the job is unknown: ' .. shown(f[1]))
        end
    end
    seen[job_id] = out[i]
end
refusal = (#results > 0 and count_refusal(5, 'cancelled')) or arrivals_refusal(leaving, 7)
if refusal then
    return refusal
end

-- The writes: nothing below can fail.
local error_text = cjson.encode(reason ~= '' and reason or 'cancelled')
if #unpacked > 0 then
    redis.call('HDEL', KEYS[1], unpack(unpacked))
end
arrivals_leave(leaving, 7, 6)
if #dropped > 0 then
    for _, set in ipairs({2, 3, 4}) do
        redis.call('ZREM', KEYS[set], unpack(dropped))
    end
end
for _, cancelled in ipairs(results) do
    local i = cancelled[1]
    redis.call('DEL', KEYS[8 + 2 * i])
    redis.call('SET', KEYS[9 + 2 * i],
        '{"status":"cancelled","result":null,"error":' .. error_text .. '}', 'EX', cancelled[2])
end
if #results > 0 then
    redis.call('HINCRBY', KEYS[5], 'cancelled', #results)
end
for _, i in ipairs(requested) do
    redis.call('HSET', KEYS[9], ids[i], reason)
    redis.call('XADD', KEYS[8], 'MAXLEN', '~', ARGV[4], '*', 'job', ids[i], 'reason', reason)
end
-- The events last: a subscriber reading the result finds it stored.
for _, cancelled in ipairs(results) do
    redis.call('PUBLISH', ARGV[1], ids[cancelled[1]])
end
return out
