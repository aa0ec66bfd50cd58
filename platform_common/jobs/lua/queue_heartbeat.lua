-- Record a worker's heartbeat (Redis time) and its count of jobs in progress, or its
-- departure, and forget workers silent for longer than the prune age.
-- KEYS[1] workers zset  KEYS[2] worker_jobs hash (worker id -> jobs in progress)
-- ARGV[1] worker id  ARGV[2] "beat" or "leave"  ARGV[3] prune age ms
-- ARGV[4] jobs in progress (ignored on "leave")
-- Returns the heartbeat time in ms. A key of another type is refused with the error
-- reply "CORRUPT <position in KEYS> <problem>" before the first write: the count lives
-- beside the heartbeat, so the two keys must never be left half-written.
-- @include time
-- @include key_types
local refusal = wrong_types({{1, 'zset'}, {2, 'hash'}})
if refusal then
    return refusal
end
local now = now_ms()
if ARGV[2] == 'leave' then
    redis.call('ZREM', KEYS[1], ARGV[1])
    redis.call('HDEL', KEYS[2], ARGV[1])
else
    redis.call('ZADD', KEYS[1], now, ARGV[1])
    redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
end
-- The silent workers' counts go with their heartbeats; HDEL in slices, since unpack()
-- is bounded by Lua's stack and a whole fleet may fall silent at once.
local cutoff = now - tonumber(ARGV[3])
local silent = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
if #silent > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff)
    for first = 1, #silent, 1000 do
        redis.call('HDEL', KEYS[2], unpack(silent, first, math.min(first + 999, #silent)))
    end
end
return now
