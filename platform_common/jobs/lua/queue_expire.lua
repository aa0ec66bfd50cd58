-- Expire jobs past their TTL that have not finished: delete the record, leave a small
-- "expired" result, count, publish, and take the job out of every index it is in.
-- Safe to run from many workers at once: each job is re-checked here.
-- Costs O(jobs expired x log N), never O(backlog): a queued job's entry stays in the
-- queue list (finding it there is an LREM over the whole list); the claim script drops
-- an entry whose record is gone when a worker pops it, writing nothing else.
-- KEYS[1] expiry zset  KEYS[2] delayed zset  KEYS[3] processing list  KEYS[4] leases zset
-- KEYS[5] stats hash   KEYS[6] waiting zset
-- KEYS[5+2i] job hash of job i, KEYS[6+2i] result key of job i
-- KEYS[7+2m] high list, KEYS[8+2m] low list (optional, both or neither; m the number of
-- job ids): Levels, a waiting job of priority high or low (its job hash's `priority`)
-- expired here also leaves its level's list (LREM from the tail, where the oldest wait),
-- so that list's length stays its level's depth
-- KEYS[9+2m] the cancels hash (optional, after the levels' two): a running job expired
-- here leaves its pending cancel request there (settled, it is no job's request any
-- more; kept, it would cancel a later job enqueued with the same id)
-- ARGV[1] completion channel  ARGV[2] seconds to keep the result of a job whose stored
-- ttl does not parse  ARGV[2+i] job id of job i
-- Returns {{expired job id...}, {trace context...}, {job id, problem}...}: the jobs
-- expired by this call, the trace context each carries ('' if none: for its log line),
-- then those of them whose record did not parse (expired all the same, the problem in
-- their result).
-- All-or-nothing: a shared key of another type or an `expired` counter that is not an
-- integer is refused with the error reply "CORRUPT <position in KEYS> <problem>" before
-- the first write; nothing after it can fail.
-- @include time
-- @include counts
-- @include levels
local MAX_TTL = 315360000 -- validation.MAX_TTL_SECONDS: what SET ... EX accepts for sure
local FINISHED = {succeeded = true, failed = true, dead = true, cancelled = true}
local LIVE = {queued = true, retrying = true, running = true}

local typed = {{1, 'zset'}, {2, 'zset'}, {3, 'list'}, {4, 'zset'}, {5, 'hash'}, {6, 'zset'}}
local m = #ARGV - 2
local high_list, low_list = KEYS[7 + 2 * m], KEYS[8 + 2 * m]  -- Levels (optional)
if low_list then
    typed[#typed + 1] = {7 + 2 * m, 'list'}
    typed[#typed + 1] = {8 + 2 * m, 'list'}
end
local cancels = KEYS[9 + 2 * m]  -- (optional)
if cancels then
    typed[#typed + 1] = {9 + 2 * m, 'hash'}
end
local refusal = wrong_types(typed) or count_refusal(5, 'expired')
if refusal then
    return refusal
end
-- A constant of the caller (expiry.py): wrong, it is a bug, not corrupt state.
local fallback_ttl = int(ARGV[2])
if not fallback_ttl or fallback_ttl <= 0 or fallback_ttl > MAX_TTL then
    return redis.error_reply('ERR fallback ttl must be an integer from 1 to ' .. MAX_TTL
        .. ', got ' .. shown(ARGV[2]) .. '; nothing was changed')
end

local now = now_ms()

-- The plan: what happens to each job, decided before anything is written.
local seen = {}
local drop = {}    -- job ids to take out of the expiry and waiting sets
local expire = {}  -- {index, job id, ttl, problem or nil, state, unknown, trace context}
for i = 1, #ARGV - 2 do
    local job_id = ARGV[2 + i]
    if not seen[job_id] then
        seen[job_id] = true
        local job_key = KEYS[5 + 2 * i]
        local f = redis.pcall('HMGET', job_key, 'state', 'expires_at', 'ttl', 'trace_context',
            'priority')
        -- unknown: the record is there but its state cannot be told (state stays nil)
        local state, expires_at, ttl, problem, gone, unknown
        if failed(f) then
            unknown, problem = true, 'stored job is not a hash'
        elseif not f[1] and not f[2] and not f[3] and redis.call('EXISTS', job_key) == 0 then
            gone = true
        else
            state = f[1] or 'queued'  -- enqueue writes no 'state' field
            expires_at, ttl = int(f[2]), int(f[3])
            if ttl and (ttl <= 0 or ttl > MAX_TTL) then
                ttl = nil
            end
            if not LIVE[state] and not FINISHED[state] then
                state, unknown = nil, true
                problem = 'stored state of the job is unknown: ' .. shown(f[1])
            elseif not expires_at then
                problem = 'stored field expires_at of the job does not parse: ' .. shown(f[2])
            elseif not ttl and LIVE[state] then
                problem = 'stored field ttl of the job does not parse: ' .. shown(f[3])
            end
        end
        -- A record that does not parse is due when the expiry set says so (enqueue
        -- wrote both alike). It is expired, not skipped: skipped, it would stay first in
        -- line for every cleanup run, and keep its record forever.
        local deadline = expires_at
        if not deadline and not gone then
            deadline = tonumber(redis.call('ZSCORE', KEYS[1], job_id))
        end
        if gone then
            drop[#drop + 1] = job_id -- nothing left to expire
        elseif deadline and now >= deadline then
            drop[#drop + 1] = job_id -- no longer waits, whatever it was doing
            if not FINISHED[state] then
                local trace = (not failed(f) and f[4]) or ''
                expire[#expire + 1] = {i, job_id, ttl or fallback_ttl, problem, state, unknown,
                    trace, (not failed(f) and f[5]) or nil}
            end
        end
    end
end

for _, job_id in ipairs(drop) do
    redis.call('ZREM', KEYS[1], job_id)
    redis.call('ZREM', KEYS[6], job_id)
end
local expired = {}
local traces = {}  -- the trace context each expired job carries ('' if none), for its log line
local reply = {expired, traces}
for _, job in ipairs(expire) do
    local i, job_id, ttl, problem, state, unknown = job[1], job[2], job[3], job[4], job[5], job[6]
    -- queued: its queue list entry stays (see above), or, scheduled and not promoted yet,
    -- it is in the delayed set. retrying: in the delayed set, or promoted already and then
    -- on the queue list, where it stays too.
    if state ~= 'running' then
        redis.call('ZREM', KEYS[2], job_id)
    end
    -- Levels: a high or low job waiting on its level's list leaves it (a scheduled or
    -- retrying one not yet promoted is not there: the LREM finds nothing).
    if state ~= 'running' and low_list and (job[8] == 'high' or job[8] == 'low') then
        redis.call('LREM', level_list(job[8], nil, high_list, low_list), -1, job_id)
    end
    if state == 'running' or unknown then
        -- Its worker's completion will now find the record gone: LeaseLost. The
        -- processing list is short (bounded by the workers' concurrency).
        redis.call('LREM', KEYS[3], 1, job_id)
        redis.call('ZREM', KEYS[4], job_id)
    end
    local error_text = 'not finished within its ttl of ' .. ttl .. ' s'
    if problem then
        error_text = 'not finished within its ttl; ' .. problem
        reply[#reply + 1] = {job_id, problem}
    end
    redis.call('DEL', KEYS[5 + 2 * i])
    redis.call('SET', KEYS[6 + 2 * i],
        '{"status":"expired","result":null,"error":' .. cjson.encode(error_text) .. '}',
        'EX', ttl)
    redis.call('PUBLISH', ARGV[1], job_id)
    expired[#expired + 1] = job_id
    traces[#traces + 1] = job[7]
end
if #expired > 0 then
    redis.call('HINCRBY', KEYS[5], 'expired', #expired)
    if cancels then
        redis.call('HDEL', cancels, unpack(expired))
    end
end
return reply
