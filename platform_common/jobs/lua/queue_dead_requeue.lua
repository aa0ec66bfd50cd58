-- Put kept jobs (dead letters, or failed jobs) back on the queue with fresh attempts and
-- a fresh TTL window (their original window has usually passed). Counted as enqueued
-- again.
-- KEYS[1] dead (or failed) list  KEYS[2] queue list  KEYS[3] expiry zset
-- KEYS[4] stats hash  KEYS[5] waiting zset
-- KEYS[4+2i] job hash of job i, KEYS[5+2i] result key of job i
-- KEYS[6+2m] high list, KEYS[7+2m] low list (optional, both or neither; m the number of
--         job ids): Levels, a job whose job hash's `priority` is high or low goes back on
--         its level's list (waking an idle worker as an enqueue of its level does)
-- KEYS[8+2m] fair share's ring (optional, after the high and low lists; keys.py `fair`):
--         a normal job whose job hash keeps a `fair_key` (the claim wrote it: it was
--         started from that key's list) goes back on its key's list, `<ring>:q:<key>`, as
--         an enqueue puts it there (include/fair_keys.lua: the key into the ring if its
--         list was empty, a wake marker on the queue list while that is empty)
-- ARGV[1] the state a record on this list holds: 'dead' or 'failed'
-- ARGV[2] the moment, Redis ms: only jobs that ended (finished_at) no later are requeued;
--         '' for any time
-- ARGV[2+i] job id of job i
-- Returns one code per job, in order: 1 requeued; 0 not a kept job of this list (not on
-- it, its record gone or in another state: a stale entry is dropped, the record is
-- left); 2 ended after the moment (a newer dead letter, maybe of a job requeued and
-- failed again; include/kept_list.lua kept_verdict): left alone.
-- The record is rewritten without HSET, so that the operator role, which runs this
-- script, needs no HSET of a job hash (one could write a payload, a whole job no one
-- enqueued; its only HSET is fair share's since hash, include/fair_keys.lua): its
-- state is deleted (a job hash without one is a queued job's), each number is deleted
-- and then added (HINCRBY) at its new value.
-- A key of another type, the ttl of a record to requeue or the enqueued counter that
-- does not parse is refused with the error reply "CORRUPT <position in KEYS> <problem>"
-- before the first write (an argument that does not parse with "ERR"): every record is
-- read and checked first, then everything is written. A key list of another type (in no
-- KEYS) is refused with "CORRUPT 0 <key> <problem>", before the first write too.
-- @include time
-- @include counts
-- @include kept_list
-- @include levels
-- @include fair_keys
local now = now_ms()

local m = #ARGV - 2
local high_list, low_list = KEYS[6 + 2 * m], KEYS[7 + 2 * m]  -- Levels (optional)
local ring = KEYS[8 + 2 * m]  -- Fair share (optional)
local typed = {{1, 'list'}, {2, 'list'}, {3, 'zset'}, {4, 'hash'}, {5, 'zset'}}
if low_list then
    typed[#typed + 1] = {6 + 2 * m, 'list'}
    typed[#typed + 1] = {7 + 2 * m, 'list'}
end
if ring then
    typed[#typed + 1] = {8 + 2 * m, 'list'}
end
local refusal = wrong_types(typed) or count_refusal(4, 'enqueued')
if refusal then
    return refusal
end
local kept_state, moment, bad_argument = kept_arguments()
if bad_argument then
    return bad_argument
end

-- Each job's verdict: its record's ttl (a number: requeue it), STALE or NEWER. The ttl is
-- checked only for a job to requeue, at most 12 digits: the new expires_at (ms) must
-- stay an integer Lua writes in plain digits.
local STALE, NEWER = 'stale', 'newer'  -- kept_verdict's words
local verdicts = {}
local priorities = {}  -- Levels: each job's `priority` field
local fair_keys = {}  -- Fair share: each job's `fair_key` field
for i = 1, #ARGV - 2 do
    local index = 4 + 2 * i
    local found = redis.call('TYPE', KEYS[index]).ok
    if found == 'hash' then
        local fields = redis.call('HMGET', KEYS[index], 'state', 'finished_at', 'ttl',
            'priority', 'fair_key')
        priorities[i] = fields[4]
        fair_keys[i] = fields[5]
        local ttl = fields[3]
        local verdict = kept_verdict(fields[1], fields[2], kept_state, moment)
        if verdict then
            verdicts[i] = verdict
        elseif ttl and #ttl <= 12 and string.find(ttl, '^%d+$') and tonumber(ttl) > 0 then
            verdicts[i] = tonumber(ttl)
            -- Fair share: the key list it goes back to, checked now (in no KEYS).
            local keyed = level_list(priorities[i], KEYS[2], high_list, low_list) == KEYS[2]
                and fair_home(ring, fair_keys[i])
            local wrong = keyed and fair_home_refusal(ring, keyed)
            if wrong then
                return wrong
            end
        else
            return corrupt(index, 'field ttl of the job does not parse: ' .. shown(ttl))
        end
    elseif found == 'none' then
        verdicts[i] = STALE
    else
        return corrupt(index, 'holds a ' .. found .. ', where the queue keeps a hash')
    end
end

local codes = {}
local requeued = 0
for i = 1, #ARGV - 2 do
    local job_id = ARGV[2 + i]
    local job_key = KEYS[4 + 2 * i]
    local verdict = verdicts[i]
    codes[i] = 0
    if verdict == NEWER then
        codes[i] = 2
    elseif redis.call('LREM', KEYS[1], 1, job_id) == 1 and verdict ~= STALE then
        -- (%d: HINCRBY takes plain integer digits only, never a Lua number's 1e+15)
        local at, expires_at = string.format('%d', now), string.format('%d', now + verdict * 1000)
        redis.call('HDEL', job_key, 'state', 'token', 'due_at', 'finished_at', 'attempts',
            'enqueued_at', 'expires_at', 'requeued_at', 'run_at')
        redis.call('HINCRBY', job_key, 'attempts', 0)
        redis.call('HINCRBY', job_key, 'enqueued_at', at)
        redis.call('HINCRBY', job_key, 'expires_at', expires_at)
        redis.call('HINCRBY', job_key, 'requeued_at', at)
        redis.call('PERSIST', job_key)  -- live again: drop the dead letter's retention TTL
        redis.call('DEL', KEYS[5 + 2 * i])
        redis.call('ZADD', KEYS[3], expires_at, job_id)
        local list = level_list(priorities[i], KEYS[2], high_list, low_list)
        local keyed = list == KEYS[2] and fair_home(ring, fair_keys[i])
        if keyed then
            -- Fair share: at the back of its key's list, as an enqueue puts it there.
            fair_joined(ring, fair_keys[i], redis.call('LPUSH', keyed, job_id), 1,
                string.format('%d', now))
            wake_idle(KEYS[2], 1)
        else
            redis.call('LPUSH', list, job_id)
            if list ~= KEYS[2] then
                wake_idle(KEYS[2], 1)
            end
        end
        redis.call('ZADD', KEYS[5], now, job_id)
        codes[i] = 1
        requeued = requeued + 1
    end
end
if requeued > 0 then
    redis.call('HINCRBY', KEYS[4], 'enqueued', requeued)
end
return codes
