-- Claim jobs a worker has just moved into the processing list: start an attempt
-- under a lease, or expire a job past its TTL without starting it.
-- KEYS[1] processing list   KEYS[2] leases zset   KEYS[3] stats hash   KEYS[4] expiry zset
-- KEYS[5] queue list (only its length is read)
-- KEYS[4+2i] job hash of job i, KEYS[5+2i] result key of job i
-- ARGV[1] lease ms   ARGV[2] worker id   ARGV[3] completion channel
-- ARGV[2+2i] job id of job i, ARGV[3+2i] the lease token the worker chose for it
-- Returns {queue length left, entry per job...}, so the worker knows whether to take
-- more without blocking; an entry is
--   {job_id, "run", token, attempts, max_attempts, expires_at, payload}
--   {job_id, "expired"} or {job_id, "skip"} (unknown, finished or someone else's)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_ms = tonumber(ARGV[1])
local n = (#ARGV - 3) / 2
local out = {0}
local started = 0
local expired = 0

for i = 1, n do
    local job_id = ARGV[2 + 2 * i]
    local token = ARGV[3 + 2 * i]
    local job_key = KEYS[4 + 2 * i]
    local f = redis.call('HMGET', job_key, 'state', 'token', 'expires_at', 'ttl')
    local state = f[1]
    if state == 'running' and f[2] == token then
        -- A replay of this very claim (the reply was lost): hand the lease back again.
        local g = redis.call('HMGET', job_key, 'attempts', 'max_attempts', 'payload')
        out[i + 1] = {job_id, 'run', token, g[1], g[2], f[3], g[3]}
    elseif f[3] and (not state or state == 'queued' or state == 'retrying') then
        -- (a record without a 'state' field is a job queued by enqueue)
        if now >= tonumber(f[3]) then
            local ttl = tonumber(f[4])
            redis.call('LREM', KEYS[1], 1, job_id)
            redis.call('ZREM', KEYS[2], job_id)
            redis.call('ZREM', KEYS[4], job_id)
            redis.call('DEL', job_key)
            redis.call('SET', KEYS[5 + 2 * i],
                '{"status":"expired","result":null,"error":"not started within its ttl of '
                .. ttl .. ' s"}', 'EX', ttl)
            redis.call('PUBLISH', ARGV[3], job_id)
            expired = expired + 1
            out[i + 1] = {job_id, 'expired'}
        else
            local attempts = redis.call('HINCRBY', job_key, 'attempts', 1)
            redis.call('HSET', job_key, 'state', 'running', 'token', token,
                'worker', ARGV[2], 'started_at', now)
            redis.call('ZADD', KEYS[2], now + lease_ms, job_id)
            local g = redis.call('HMGET', job_key, 'max_attempts', 'payload')
            started = started + 1
            out[i + 1] = {job_id, 'run', token, attempts, g[1], f[3], g[2]}
        end
    else
        -- Not claimable (gone, finished, or a stray second entry of a running job):
        -- drop this processing entry only.
        redis.call('LREM', KEYS[1], 1, job_id)
        out[i + 1] = {job_id, 'skip'}
    end
end
if started > 0 then
    redis.call('HINCRBY', KEYS[3], 'started', started)
end
if expired > 0 then
    redis.call('HINCRBY', KEYS[3], 'expired', expired)
end
out[1] = redis.call('LLEN', KEYS[5])
return out
