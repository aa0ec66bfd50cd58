-- Expire jobs past their TTL that have not finished: take them out of wherever they
-- wait or run, delete the record, leave a small "expired" result, count, publish.
-- Safe to run from many workers at once: each job is re-checked here.
-- KEYS[1] expiry zset  KEYS[2] queue list  KEYS[3] delayed zset  KEYS[4] processing list
-- KEYS[5] leases zset  KEYS[6] stats hash  KEYS[7] waiting zset
-- KEYS[6+2i] job hash of job i, KEYS[7+2i] result key of job i
-- ARGV[1] completion channel; ARGV[1+i] job id of job i
-- Returns the job ids expired by this call.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = {}
for i = 1, #ARGV - 1 do
    local job_id = ARGV[1 + i]
    local job_key = KEYS[6 + 2 * i]
    local f = redis.call('HMGET', job_key, 'state', 'expires_at', 'ttl')
    local state = f[1] or 'queued'  -- enqueue writes no 'state' field
    if not f[2] then
        redis.call('ZREM', KEYS[1], job_id)  -- the record is gone: nothing to expire
        redis.call('ZREM', KEYS[7], job_id)
    elseif now >= tonumber(f[2]) then
        local live = true
        if state == 'queued' then
            -- Oldest jobs sit at the consuming end: search from there. If a worker
            -- already moved it, its claim finds the record gone and drops it.
            redis.call('LREM', KEYS[2], -1, job_id)
        elseif state == 'retrying' then
            if redis.call('ZREM', KEYS[3], job_id) == 0 then
                redis.call('LREM', KEYS[2], -1, job_id)
            end
        elseif state == 'running' then
            -- Its worker's completion will now find the record gone: LeaseLost.
            redis.call('LREM', KEYS[4], 1, job_id)
            redis.call('ZREM', KEYS[5], job_id)
        else
            live = false  -- finished already
        end
        redis.call('ZREM', KEYS[1], job_id)
        redis.call('ZREM', KEYS[7], job_id)  -- no longer waits, whatever it was doing
        if live then
            local ttl = tonumber(f[3])
            redis.call('DEL', job_key)
            redis.call('SET', KEYS[7 + 2 * i],
                '{"status":"expired","result":null,"error":"not finished within its ttl of '
                .. ttl .. ' s"}', 'EX', ttl)
            redis.call('PUBLISH', ARGV[1], job_id)
            expired[#expired + 1] = job_id
        end
    end
end
if #expired > 0 then
    redis.call('HINCRBY', KEYS[6], 'expired', #expired)
end
return expired
