-- Move retries whose backoff has elapsed from the delayed set to the front of the queue.
-- KEYS[1] delayed zset  KEYS[2] queue list  KEYS[3] waiting zset
-- ARGV[1] the most jobs to move in one call
-- Returns the number of jobs moved. A key of another type is refused with the error
-- reply "CORRUPT <position in KEYS> <problem>" before the first write.
-- @include time
-- @include key_types
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
if #due == 0 then
    return 0
end
local refusal = wrong_types({{2, 'list'}, {3, 'zset'}})
if refusal then
    return refusal
end
-- One command per key for the whole batch (unpack() takes the 2 x 1,000 of a full one).
local arrivals = {}
for _, job_id in ipairs(due) do
    arrivals[#arrivals + 1] = now  -- waiting again from now on
    arrivals[#arrivals + 1] = job_id
end
redis.call('ZREM', KEYS[1], unpack(due))
-- RPUSH: the consuming end; a retry has waited its turn already.
redis.call('RPUSH', KEYS[2], unpack(due))
redis.call('ZADD', KEYS[3], unpack(arrivals))
return #due
