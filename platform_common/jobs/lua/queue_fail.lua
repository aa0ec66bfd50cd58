-- End an attempt that did not succeed: retry it after a backoff, dead-letter it after
-- its last attempt, fail it for good, or give it back unstarted.
-- KEYS[1] processing list  KEYS[2] leases zset  KEYS[3] delayed zset  KEYS[4] dead list
-- KEYS[5] queue list       KEYS[6] expiry zset  KEYS[7] stats hash    KEYS[8] job hash
-- KEYS[9] result key       KEYS[10] waiting zset (a job given back to the queue list
--                          waits again; ZADD NX keeps the arrival of one that never
--                          left it, i.e. taken but never claimed)
-- KEYS[11] failed list     (optional: where a job failed for good by mode "fatal" is
--                          kept for an operator; absent: it is kept in no list)
-- KEYS[12] high list, KEYS[13] low list (optional, both or neither; Levels: a job given
--                          back to the queue waits on its level's list, by its job
--                          hash's `priority`, and wakes an idle worker as an enqueue of
--                          its level does, include/levels.lua; without them, on the
--                          queue list)
-- KEYS[14] cancels hash    (optional, after 11 to 13: job id -> reason of a cancel
--                          request; absent: no cancel fence. The Python worker and
--                          reaper always pass it)
-- KEYS[15] fair share's ring (optional, after 11 to 14; keys.py `fair`): a job given back
--                          to the queue whose job hash keeps a `fair_key` (the claim
--                          wrote it: started from that key's list) and is of priority
--                          normal goes back on its key's list, `<ring>:q:<key>`, the key
--                          into the ring if its list was empty, a wake marker on the
--                          queue list while that is empty (include/fair_keys.lua).
-- ARGV[1] job id
-- ARGV[2] mode: "error"   the handler raised; retry unless that was the last attempt
--               "fatal"   the handler raised a non-retryable error; fail now
--               "corrupt" the stored job does not parse (payload or a field): dead-
--                         letter now (retrying cannot help; kept for an operator)
--               "release" a worker shutting down gives the attempt back (not counted)
--               "lost"    the reaper: the lease expired, so the worker is gone; the
--                         crash counts as an attempt. Fenced by the expired lease.
-- ARGV[3] lease token (ignored in mode "lost")  ARGV[4] error text
-- ARGV[5] completion channel
-- ARGV[6] backoff base ms  ARGV[7] backoff factor  ARGV[8] backoff max ms
-- ARGV[9] traceback text, kept with the error in the history entry ("" or absent: none)
-- ARGV[10] retention, whole seconds >= 1 (optional): a job that ends dead or failed keeps
--          its record and result for the longer of its own TTL and this, then Redis
--          drops both (the dead/failed list entry is pruned by retention.py). Absent:
--          a dead letter is kept without a TTL, a failed job for its own TTL.
-- ARGV[11] the exception's class (optional; "" or absent: not counted by class). Every
--          attempt that ends in an error (any mode but "release"; "lost" included)
--          bumps stats field error:<class>; a class that is not [%w_.]{1,100} counts as
--          "other". Bounded: with ARGV[12] classes already holding a field (stats field
--          error_classes counts them), a new class is counted as error:other instead.
-- ARGV[12] that cap, an integer >= 0 (required with ARGV[11])
-- All-or-nothing: every key's type, the counters this call may bump and ARGV[10] are
-- checked before the first write. A key of another type or a counter that is not an
-- integer is refused with the error reply "CORRUPT <position in KEYS> <problem>"
-- (nothing written; the lease stays, so the reaper tries again once it lapses); the key
-- list a job goes back to, in no KEYS, with "CORRUPT 0 <key> <problem>".
-- A numeric field of the record that does not parse never makes this script fail: the
-- attempt then ends dead-lettered.
-- Cancel (queue/cancel.py): an attempt of a job with a cancel request (its entry in the
-- cancels hash KEYS[14], the reason; its entry deleted) ends cancelled in every mode
-- ("lost" included): no retry, no dead letter, no failure recorded; its result says
-- cancelled with the reason, kept for its TTL, counted in `cancelled`, published. Reply
-- {"cancelled"} ({"cancelled", trace_context} in mode "lost").
-- Returns {"retrying", due_ms} {"dead"} {"failed"} {"released"} {"requeued"}
--         {"replay", state} {"skip"} or {"lost", state}; in mode "lost" the ended
--         attempt's replies also carry the record's trace_context ("" if none), for the
--         reaper's log line: {"retrying", due_ms, trace_context} {"dead", trace_context}
-- @include time
-- @include counts
-- @include levels
-- @include fair_keys
local job_id = ARGV[1]
local mode = ARGV[2]

local kinds = {'list', 'zset', 'zset', 'list', 'list', 'zset', 'hash', 'hash', nil, 'zset',
    'list', 'list', 'list', 'hash', 'list'}
for i = 1, 15 do
    local refusal = kinds[i] and KEYS[i] and wrong_type(i, kinds[i])
    if refusal then
        return refusal
    end
end
-- The class field this call would bump (decided before any write), or nil.
local error_class = nil
if ARGV[11] and ARGV[11] ~= '' and mode ~= 'release' then
    error_class = ARGV[11]
    if #error_class > 100 or not string.find(error_class, '^[%w_.]+$') then
        error_class = 'other'
    end
end
local fields = {'retried', 'failed', 'dead_lettered'}
if error_class then
    fields[4] = 'error_classes'
    fields[5] = 'error:' .. error_class
end
local counters = redis.call('HMGET', KEYS[7], unpack(fields))
local refusal = counts_refusal(7, fields, counters)
if refusal then
    return refusal
end
local new_class = false
if error_class and error_class ~= 'other' and not counters[5] then
    local cap = int(ARGV[12] or '')
    if not cap or cap < 0 then
        return redis.error_reply('ERR the error class cap must be an integer >= 0, got '
            .. tostring(ARGV[12]) .. '; nothing was changed')
    end
    if (tonumber(counters[4]) or 0) < cap then
        new_class = true
    else
        error_class = 'other'
        refusal = count_refusal(7, 'error:other')
        if refusal then
            return refusal
        end
    end
end
local retention = nil
if ARGV[10] and ARGV[10] ~= '' then
    retention = int(ARGV[10])
    if not retention or retention < 1 then
        return redis.error_reply('ERR retention must be whole seconds >= 1, got '
            .. ARGV[10] .. '; nothing was changed')
    end
end

local now = now_ms()
local f = redis.call('HMGET', KEYS[8], 'state', 'token', 'attempts', 'max_attempts', 'ttl',
    'worker', 'started_at', 'history', 'expires_at', 'trace_context', 'priority', 'fair_key')
-- Cancel: the request, if the caller passed the cancels hash (its type checked above).
f[13] = KEYS[14] and redis.call('HGET', KEYS[14], job_id) or nil
local state = f[1]
if f[9] and not state then
    state = 'queued'  -- enqueue writes no 'state' field
end

local function drop_lease()
    redis.call('LREM', KEYS[1], 1, job_id)
    redis.call('ZREM', KEYS[2], job_id)
end

-- Back on the queue (its consuming end): Levels, on its level's list; Fair share, a
-- normal job with a `fair_key` on its key's list (KEYS[15] passed). The key list (nil:
-- none) and its refusal (it holds another type) are read before the first write.
local function its_key_list()
    if level_list(f[11], KEYS[5], KEYS[12], KEYS[13]) ~= KEYS[5] then
        return nil, nil
    end
    local keyed = fair_home(KEYS[15], f[12])
    return keyed, keyed and fair_home_refusal(KEYS[15], keyed)
end
local function back_to_its_level(keyed)
    if keyed then
        fair_joined(KEYS[15], f[12], redis.call('RPUSH', keyed, job_id), 1,
            string.format('%d', now))
        wake_idle(KEYS[5], 1)
        return
    end
    local list = level_list(f[11], KEYS[5], KEYS[12], KEYS[13])
    redis.call('RPUSH', list, job_id)
    if list ~= KEYS[5] then
        wake_idle(KEYS[5], 1)
    end
end

-- ---- cancel (queue/cancel.py): a requested job's attempt ends it cancelled ----
-- Called where the attempt is known to be this call's (token, or an expired lease) and
-- running, before any write: its one check comes first.
local function end_cancelled()
    local counted = redis.call('HGET', KEYS[7], 'cancelled')
    if counted and not count(counted) then
        return corrupt(7, 'field cancelled is not an integer: ' .. shown(counted))
    end
    local ttl = int(f[5])
    local keep = (ttl and ttl > 0 and ttl <= 315360000) and ttl or nil
    keep = keep or (ARGV[10] and int(ARGV[10])) or 86400
    drop_lease()
    redis.call('ZREM', KEYS[6], job_id)
    redis.call('HSET', KEYS[8], 'state', 'cancelled', 'finished_at', now)
    redis.call('PEXPIRE', KEYS[8], string.format('%d', keep * 1000))
    redis.call('SET', KEYS[9], '{"status":"cancelled","result":null,"error":'
        .. cjson.encode(f[13] ~= '' and f[13] or 'cancelled') .. '}', 'EX', keep)
    redis.call('HINCRBY', KEYS[7], 'cancelled', 1)
    redis.call('HDEL', KEYS[14], job_id)
    redis.call('PUBLISH', ARGV[5], job_id)
    if mode == 'lost' then
        return {'cancelled', f[10] or ''}
    end
    return {'cancelled'}
end
-- ---- end cancel ----

if mode == 'lost' then
    local deadline = redis.call('ZSCORE', KEYS[2], job_id)
    if not deadline or tonumber(deadline) > now then
        return {'skip'}  -- renewed meanwhile, or already handled
    end
    if state == 'queued' or state == 'retrying' then
        -- Taken with BLMOVE by a worker that died before claiming it: not an attempt.
        local keyed, refusal = its_key_list()
        if refusal then
            return refusal
        end
        drop_lease()
        back_to_its_level(keyed)
        redis.call('ZADD', KEYS[10], 'NX', now, job_id)
        return {'requeued'}
    end
    if state ~= 'running' then
        drop_lease()
        return {'skip'}
    end
    if f[13] then
        return end_cancelled()  -- cancel
    end
    -- The stale worker must not be able to complete, fail or replay this attempt.
    redis.call('HDEL', KEYS[8], 'token')
else
    if f[2] ~= ARGV[3] then
        return {'lost', state or 'missing'}
    end
    if state ~= 'running' then
        return {'replay', state}
    end
    if f[13] then
        return end_cancelled()  -- cancel
    end
    if mode == 'release' then
        local keyed, refusal = its_key_list()
        if refusal then
            return refusal
        end
        drop_lease()
        -- HSET of the parsed value, not HINCRBY: HINCRBY refuses a field int() reads
        -- ("007", "-0") and would fail after drop_lease's writes.
        if int(f[3]) then
            redis.call('HSET', KEYS[8], 'attempts', int(f[3]) - 1)
        end
        redis.call('HSET', KEYS[8], 'state', 'queued')
        redis.call('HDEL', KEYS[8], 'token')
        back_to_its_level(keyed)
        redis.call('ZADD', KEYS[10], 'NX', now, job_id)
        return {'released'}
    end
end

local attempts = int(f[3])
local max_attempts = int(f[4])
local ttl = int(f[5])
if ttl and ttl <= 0 then
    ttl = nil
end
local error_text = ARGV[4]
-- Only the reaper wants it (a worker knows its trace); nil leaves other replies unchanged.
local carried = nil
if mode == 'lost' then
    carried = f[10] or ''
end
-- int(), not tonumber(): 'inf' or 'nan' would make cjson.encode fail after the writes above.
local entry = {attempt = attempts, worker = f[6] or '', started_at = int(f[7]),
    ended_at = now, error = error_text, outcome = mode}
if ARGV[9] and ARGV[9] ~= '' then
    entry.traceback = ARGV[9]
end
local outcome
if mode == 'fatal' then
    outcome = 'failed'
elseif mode ~= 'corrupt' and attempts and max_attempts and attempts < max_attempts then
    local delay = tonumber(ARGV[6]) * tonumber(ARGV[7]) ^ (attempts - 1)
    delay = math.floor(math.min(delay, tonumber(ARGV[8])))
    entry.retry_at = now + delay
    outcome = 'retrying'
else
    outcome = 'dead'
end
if error_class then
    redis.call('HINCRBY', KEYS[7], 'error:' .. error_class, 1)
    if new_class then
        redis.call('HINCRBY', KEYS[7], 'error_classes', 1)
    end
end
local encoded = cjson.encode(entry)
local history = f[8]
if history then
    history = string.sub(history, 1, -2) .. ',' .. encoded .. ']'
else
    history = '[' .. encoded .. ']'
end
drop_lease()
redis.call('HSET', KEYS[8], 'state', outcome, 'last_error', error_text, 'history', history)

if outcome == 'retrying' then
    redis.call('ZADD', KEYS[3], entry.retry_at, job_id)
    redis.call('HSET', KEYS[8], 'due_at', entry.retry_at)
    redis.call('HINCRBY', KEYS[7], 'retried', 1)
    return {'retrying', entry.retry_at, carried}
end

redis.call('HSET', KEYS[8], 'finished_at', now)
redis.call('ZREM', KEYS[6], job_id)
-- Kept for an operator: for the retention (never shorter than a success's result would
-- live); without a retention, a dead letter until requeued or purged.
local keep = ttl
if retention then
    keep = math.max(ttl or 0, retention)
elseif outcome == 'dead' then
    keep = nil
end
local result = '{"status":"failed","result":null,"error":' .. cjson.encode(error_text) .. '}'
if keep then
    redis.call('SET', KEYS[9], result, 'EX', keep)
    redis.call('PEXPIRE', KEYS[8], string.format('%d', keep * 1000))
else
    redis.call('SET', KEYS[9], result)
end
redis.call('HINCRBY', KEYS[7], 'failed', 1)
if outcome == 'dead' then
    redis.call('LPUSH', KEYS[4], job_id)
    redis.call('HINCRBY', KEYS[7], 'dead_lettered', 1)
elseif KEYS[11] then
    redis.call('LPUSH', KEYS[11], job_id)
end
redis.call('PUBLISH', ARGV[5], job_id)
if carried then
    return {outcome, carried}
end
return {outcome}
