-- Move retries whose backoff has elapsed from the delayed set to the front of the queue.
-- KEYS[1] delayed zset  KEYS[2] queue list  KEYS[3] waiting zset
-- ARGV[1] the most jobs to move in one call
-- Returns the number of jobs moved.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, job_id in ipairs(due) do
    redis.call('ZREM', KEYS[1], job_id)
    -- RPUSH: the consuming end; a retry has waited its turn already.
    redis.call('RPUSH', KEYS[2], job_id)
    redis.call('ZADD', KEYS[3], now, job_id)  -- waiting again from now on
end
return #due
