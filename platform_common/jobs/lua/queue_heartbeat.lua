-- Record a worker's heartbeat (Redis time), or its departure, and forget workers
-- silent for longer than the prune age.
-- KEYS[1] workers zset
-- ARGV[1] worker id  ARGV[2] "beat" or "leave"  ARGV[3] prune age ms
-- Returns the heartbeat time in ms.
-- All or nothing without checks of its own: one key, whose first write (ZADD or ZREM)
-- fails on a key of another type before anything is written.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[2] == 'leave' then
    redis.call('ZREM', KEYS[1], ARGV[1])
else
    redis.call('ZADD', KEYS[1], now, ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
return now
