-- Prune a list of jobs kept for an operator (the dead-letter list or the failed list)
-- from its oldest end: entries beyond the cap go with their record and result, and
-- entries whose record Redis already dropped (its retention TTL passed) go too.
-- Bounded: only the ids the caller read from the list's oldest end are looked at, and
-- each is searched for from that end. A job requeued meanwhile is not in the list any
-- more, so nothing of it is deleted.
-- KEYS[1] the list; KEYS[2i] job hash of job i, KEYS[2i+1] result key of job i
-- ARGV[1] the cap (most entries kept, >= 1); ARGV[1+i] job id i, oldest first
-- Returns {pruned beyond the cap, pruned because their record expired, job id...}: the
-- ids last are of entries pruned beyond the cap whose job key held another type than a
-- hash; that key is no record this queue wrote, so it is left as it is.
-- All-or-nothing: a list of another type is refused with the error reply
-- "CORRUPT <position in KEYS> <problem>" before the first write; every job key is
-- looked at (TYPE, the state field of a hash) before the first write too, and nothing
-- written after that can fail (LREM on a list, DEL of keys of any type).
-- @include key_types
local refusal = wrong_type(1, 'list')
if refusal then
    return refusal
end
-- A setting of the caller (dead_letter_max, bounded at startup): wrong, it is a bug.
local cap = ARGV[1]
if not (#cap <= 9 and string.find(cap, '^%d+$') and tonumber(cap) >= 1) then
    return redis.error_reply('ERR the cap must be an integer >= 1, got ' .. cap
        .. '; nothing was changed')
end
cap = tonumber(cap)

-- What each job key holds, read before anything is written: 'gone', 'foreign' (another
-- type than a hash), or the hash's state field ('' when it has none: a queued job, as
-- enqueue writes it, that reuses the id).
local held = {}
for i = 1, #ARGV - 1 do
    local kind = redis.call('TYPE', KEYS[2 * i]).ok
    if kind == 'none' then
        held[i] = 'gone'
    elseif kind ~= 'hash' then
        held[i] = 'foreign'
    else
        held[i] = redis.call('HMGET', KEYS[2 * i], 'state')[1] or ''
    end
end

local length = redis.call('LLEN', KEYS[1])
local beyond_cap, expired = 0, 0
local reply = {0, 0}
local deleted = {}
for i = 1, #ARGV - 1 do
    local job_id = ARGV[1 + i]
    local job_key, result_key = KEYS[2 * i], KEYS[2 * i + 1]
    if length > cap then
        if redis.call('LREM', KEYS[1], -1, job_id) == 1 then
            if held[i] == 'dead' or held[i] == 'failed' then
                -- Only this entry's job: never a new job that reuses the id of one whose
                -- record had expired (what is left of that one has its TTL anyway).
                redis.call('DEL', job_key, result_key)
                deleted[job_id] = true
            elseif held[i] == 'foreign' then
                reply[#reply + 1] = job_id
            end
            length = length - 1
            beyond_cap = beyond_cap + 1
        end
    elseif held[i] == 'gone' or deleted[job_id] then
        if redis.call('LREM', KEYS[1], -1, job_id) == 1 then
            length = length - 1
            expired = expired + 1
        end
    end
end
reply[1], reply[2] = beyond_cap, expired
return reply
