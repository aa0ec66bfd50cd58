-- Put kept jobs (dead letters, or failed jobs) back on the queue with fresh attempts and
-- a fresh TTL window (their original window has usually passed). Counted as enqueued
-- again.
-- KEYS[1] dead (or failed) list  KEYS[2] queue list  KEYS[3] expiry zset
-- KEYS[4] stats hash  KEYS[5] waiting zset
-- KEYS[4+2i] job hash of job i, KEYS[5+2i] result key of job i
-- ARGV[i] job id of job i
-- Returns the job ids requeued (ids not in the list, or whose record is gone, are not;
-- the entry of a record that is gone is dropped).
-- A key of another type, a record's ttl or the enqueued counter that does not parse is
-- refused with the error reply "CORRUPT <position in KEYS> <problem>" before the first
-- write: every record is read and checked first, then everything is written.
-- @include time
-- @include numbers
-- @include key_types
local now = now_ms()

local refusal = wrong_types({{1, 'list'}, {2, 'list'}, {3, 'zset'}, {4, 'hash'}, {5, 'zset'}})
if refusal then
    return refusal
end
local enqueued = redis.call('HGET', KEYS[4], 'enqueued')
if enqueued and not count(enqueued) then
    return corrupt(4, 'field enqueued is not an integer: ' .. shown(enqueued))
end
-- Each record's ttl, or false when there is no record. At most 12 digits: the new
-- expires_at (ms) must stay an integer Lua writes in plain digits.
local ttls = {}
for i = 1, #ARGV do
    local index = 4 + 2 * i
    local found = redis.call('TYPE', KEYS[index]).ok
    if found == 'hash' then
        local ttl = redis.call('HGET', KEYS[index], 'ttl')
        if not (ttl and #ttl <= 12 and string.find(ttl, '^%d+$') and tonumber(ttl) > 0) then
            return corrupt(index, 'field ttl of the job does not parse: ' .. shown(ttl))
        end
        ttls[i] = tonumber(ttl)
    elseif found == 'none' then
        ttls[i] = false
    else
        return corrupt(index, 'holds a ' .. found .. ', where the queue keeps a hash')
    end
end

local requeued = {}
for i = 1, #ARGV do
    local job_id = ARGV[i]
    local job_key = KEYS[4 + 2 * i]
    if redis.call('LREM', KEYS[1], 1, job_id) == 1 and ttls[i] then
        local expires_at = now + ttls[i] * 1000
        redis.call('HSET', job_key, 'state', 'queued', 'attempts', 0, 'enqueued_at', now,
            'expires_at', expires_at, 'requeued_at', now)
        redis.call('HDEL', job_key, 'token', 'due_at', 'finished_at')
        redis.call('PERSIST', job_key)  -- live again: drop the dead letter's retention TTL
        redis.call('DEL', KEYS[5 + 2 * i])
        redis.call('ZADD', KEYS[3], expires_at, job_id)
        redis.call('LPUSH', KEYS[2], job_id)
        redis.call('ZADD', KEYS[5], now, job_id)
        requeued[#requeued + 1] = job_id
    end
end
if #requeued > 0 then
    redis.call('HINCRBY', KEYS[4], 'enqueued', #requeued)
end
return requeued
