-- Record a worker's heartbeat (Redis time), its count of jobs in progress and its
-- concurrency, or its departure, and forget workers silent for longer than the prune age.
-- KEYS[1] workers zset  KEYS[2] worker_jobs hash (worker id -> jobs in progress)
-- KEYS[3] (optional) worker_concurrency hash (worker id -> the most jobs it runs at once)
-- ARGV[1] worker id  ARGV[2] "beat" or "leave"  ARGV[3] prune age ms
-- ARGV[4] jobs in progress (ignored on "leave")  ARGV[5] its concurrency (with KEYS[3])
-- Returns the heartbeat time in ms. A key of another type is refused with the error
-- reply "CORRUPT <position in KEYS> <problem>" before the first write: the counts live
-- beside the heartbeat, so the keys must never be left half-written. A caller without
-- KEYS[3] (a worker of an earlier release, or in another language) writes no concurrency.
-- @include time
-- @include key_types
local expected = {{1, 'zset'}, {2, 'hash'}}
if #KEYS >= 3 then
    expected[3] = {3, 'hash'}
end
local refusal = wrong_types(expected)
if refusal then
    return refusal
end
local now = now_ms()
if ARGV[2] == 'leave' then
    redis.call('ZREM', KEYS[1], ARGV[1])
    redis.call('HDEL', KEYS[2], ARGV[1])
    if #KEYS >= 3 then
        redis.call('HDEL', KEYS[3], ARGV[1])
    end
else
    redis.call('ZADD', KEYS[1], now, ARGV[1])
    redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
    if #KEYS >= 3 then
        redis.call('HSET', KEYS[3], ARGV[1], ARGV[5])
    end
end
-- The silent workers' counts go with their heartbeats; HDEL in slices, since unpack()
-- is bounded by Lua's stack and a whole fleet may fall silent at once.
local cutoff = now - tonumber(ARGV[3])
local silent = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff)
if #silent > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cutoff)
    for first = 1, #silent, 1000 do
        local slice = {unpack(silent, first, math.min(first + 999, #silent))}
        redis.call('HDEL', KEYS[2], unpack(slice))
        if #KEYS >= 3 then
            redis.call('HDEL', KEYS[3], unpack(slice))
        end
    end
end
return now
