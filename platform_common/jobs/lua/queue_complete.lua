-- Complete a job successfully, fenced by its lease token: store the result with the
-- job's TTL, record latency, then publish the completion event.
-- KEYS[1] processing list  KEYS[2] leases zset  KEYS[3] expiry zset  KEYS[4] stats hash
-- KEYS[5] job hash         KEYS[6] result key
-- ARGV[1] job id  ARGV[2] lease token  ARGV[3] result JSON (already encoded)
-- ARGV[4] completion channel  ARGV[5] the histogram's +Inf bucket field
-- ARGV[6..] pairs (upper bound in seconds, bucket field), bounds ascending
-- Returns {"ok"}, {"replay"} (this completion already happened) or {"lost", state}
local job_id = ARGV[1]
local f = redis.call('HMGET', KEYS[5], 'state', 'token', 'enqueued_at', 'ttl')
local state = f[1]
if f[2] ~= ARGV[2] then
    return {'lost', state or 'missing'}
end
if state ~= 'running' then
    if state == 'succeeded' then
        return {'replay'}
    end
    return {'lost', state or 'missing'}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(f[4])
redis.call('SET', KEYS[6], '{"status":"succeeded","result":' .. ARGV[3] .. ',"error":null}',
    'EX', ttl)
redis.call('HSET', KEYS[5], 'state', 'succeeded', 'finished_at', now)
redis.call('PEXPIRE', KEYS[5], ttl * 1000)
redis.call('LREM', KEYS[1], 1, job_id)
redis.call('ZREM', KEYS[2], job_id)
redis.call('ZREM', KEYS[3], job_id)

local latency = (now - tonumber(f[3])) / 1000
if latency < 0 then
    latency = 0
end
local bucket = ARGV[5]
for i = 6, #ARGV - 1, 2 do
    if latency <= tonumber(ARGV[i]) then
        bucket = ARGV[i + 1]
        break
    end
end
redis.call('HINCRBY', KEYS[4], 'completed', 1)
redis.call('HINCRBY', KEYS[4], 'latency_count', 1)
redis.call('HINCRBYFLOAT', KEYS[4], 'latency_sum', latency)
redis.call('HINCRBY', KEYS[4], bucket, 1)
redis.call('PUBLISH', ARGV[4], job_id)
return {'ok'}
