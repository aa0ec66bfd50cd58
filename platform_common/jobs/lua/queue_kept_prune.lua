-- Prune a list of jobs kept for an operator (the dead-letter list or the failed list)
-- from its oldest end: entries beyond the cap go with their record and result, and
-- entries whose record Redis already dropped (its retention TTL passed) go too.
-- Bounded: only the ids the caller read from the list's oldest end are looked at, and
-- each is searched for from that end. A job requeued meanwhile is not in the list any
-- more, so nothing of it is deleted.
-- KEYS[1] the list; KEYS[2i] job hash of job i, KEYS[2i+1] result key of job i
-- ARGV[1] the cap (most entries kept, >= 1); ARGV[1+i] job id i, oldest first
-- All-or-nothing: the list's type and the cap are checked before the first write.
-- Returns {pruned beyond the cap, pruned because their record expired}
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'list' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[1] .. ' is a ' .. kind
        .. ', expected a list; nothing was changed')
end
local cap = tonumber(ARGV[1])
if not cap or cap < 1 or cap ~= math.floor(cap) then
    return redis.error_reply('ERR the cap must be an integer >= 1, got ' .. ARGV[1])
end
local length = redis.call('LLEN', KEYS[1])
local beyond_cap, expired = 0, 0
for i = 1, #ARGV - 1 do
    local job_id = ARGV[1 + i]
    local job_key, result_key = KEYS[2 * i], KEYS[2 * i + 1]
    if length > cap then
        if redis.call('LREM', KEYS[1], -1, job_id) == 1 then
            local f = redis.call('HMGET', job_key, 'state')
            if f[1] == 'dead' or f[1] == 'failed' then
                -- Only this entry's job: never a new job that reuses the id of one whose
                -- record had expired (what is left of that one has its TTL anyway).
                redis.call('DEL', job_key, result_key)
            end
            length = length - 1
            beyond_cap = beyond_cap + 1
        end
    elseif redis.call('EXISTS', job_key) == 0 then
        if redis.call('LREM', KEYS[1], -1, job_id) == 1 then
            length = length - 1
            expired = expired + 1
        end
    end
end
return {beyond_cap, expired}
