-- Put dead-lettered jobs back on the queue with fresh attempts and a fresh TTL window
-- (their original window has usually passed). Counted as enqueued again.
-- KEYS[1] dead list  KEYS[2] queue list  KEYS[3] expiry zset  KEYS[4] stats hash
-- KEYS[5] waiting zset
-- KEYS[4+2i] job hash of job i, KEYS[5+2i] result key of job i
-- ARGV[i] job id of job i
-- Returns the job ids requeued (ids not in the dead-letter list are ignored).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local requeued = {}
for i = 1, #ARGV do
    local job_id = ARGV[i]
    local job_key = KEYS[4 + 2 * i]
    if redis.call('LREM', KEYS[1], 1, job_id) == 1 and redis.call('EXISTS', job_key) == 1 then
        local expires_at = now + tonumber(redis.call('HGET', job_key, 'ttl')) * 1000
        redis.call('HSET', job_key, 'state', 'queued', 'attempts', 0, 'enqueued_at', now,
            'expires_at', expires_at, 'requeued_at', now)
        redis.call('HDEL', job_key, 'token', 'due_at', 'finished_at')
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
