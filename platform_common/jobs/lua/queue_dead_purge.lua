-- Delete kept jobs for good: the list entry, the record and the result.
-- KEYS[1] dead (or failed) list; KEYS[2i] job hash of job i, KEYS[2i+1] result key of job i
-- ARGV[1] the state a record on this list holds: 'dead' or 'failed'
-- ARGV[2] the moment, Redis ms: only jobs that ended (finished_at) no later are purged;
--         '' for any time
-- ARGV[2+i] job id of job i
-- Returns one code per job, in order: 1 purged; 0 not a kept job of this list (not on it,
-- its record gone or in another state: a stale entry is dropped, the record is left);
-- 2 ended after the moment (a newer dead letter, maybe of a requeued job; include/
-- kept_list.lua kept_verdict): left alone. A job key of another type than a hash is no
-- record the queue wrote: it is deleted with its entry.
-- Every check runs before the first write: a list of another type, or an argument that
-- does not parse, is refused and nothing changes; LREM and DEL cannot fail after that.
-- @include kept_list
local found = redis.call('TYPE', KEYS[1]).ok
if found ~= 'list' and found ~= 'none' then
    return redis.error_reply('CORRUPT 1 holds a ' .. found .. ', where the queue keeps a list')
end
local kept_state, moment, bad_argument = kept_arguments()
if bad_argument then
    return bad_argument
end

local PURGE, STALE, NEWER = 1, 0, 2
local verdicts = {}
for i = 1, #ARGV - 2 do
    local key = KEYS[2 * i]
    local kind = redis.call('TYPE', key).ok
    if kind == 'none' then
        verdicts[i] = STALE
    elseif kind ~= 'hash' then
        verdicts[i] = PURGE
    else
        local fields = redis.call('HMGET', key, 'state', 'finished_at')
        local verdict = kept_verdict(fields[1], fields[2], kept_state, moment)
        verdicts[i] = verdict == 'stale' and STALE or verdict == 'newer' and NEWER or PURGE
    end
end

local codes = {}
for i = 1, #ARGV - 2 do
    local job_id = ARGV[2 + i]
    codes[i] = 0
    if verdicts[i] == NEWER then
        codes[i] = 2
    elseif redis.call('LREM', KEYS[1], 1, job_id) == 1 and verdicts[i] == PURGE then
        redis.call('DEL', KEYS[2 * i], KEYS[2 * i + 1])
        codes[i] = 1
    end
end
return codes
