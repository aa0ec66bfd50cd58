-- Find the jobs whose lease expired (their worker is gone), for queue_fail's "lost" mode.
-- A job a worker moved into the processing list but never claimed (it died in between)
-- has no lease yet: give it a provisional one, so it is found once that one expires too.
-- Such a job still packed in the queued hash (never claimed at all: the claim takes it
-- out) goes back to the queue list here, unchanged and uncounted, like queue_fail does
-- for a taken job that has its job hash.
-- KEYS[1] processing list  KEYS[2] leases zset  KEYS[3] queued hash  KEYS[4] queue list
-- ARGV[1] provisional lease ms  ARGV[2] how many entries of processing to inspect (the
-- oldest)  ARGV[3] the most expired job ids to return
-- Returns {n, expired job id...}: n packed jobs given back to the queue, then the other
-- expired job ids, oldest deadline first.
-- All or nothing: the key types are checked before the first write.
-- @include time
-- @include key_types
local refusal = wrong_types({{1, 'list'}, {2, 'zset'}, {3, 'hash'}, {4, 'list'}})
if refusal then
    return refusal
end
local now = now_ms()
local provisional = now + tonumber(ARGV[1])
local taken = redis.call('LRANGE', KEYS[1], -tonumber(ARGV[2]), -1)
if #taken > 0 then
    local leases = {}
    for _, job_id in ipairs(taken) do
        leases[#leases + 1] = provisional
        leases[#leases + 1] = job_id
    end
    redis.call('ZADD', KEYS[2], 'NX', unpack(leases))
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local out = {0}
for _, job_id in ipairs(expired) do
    if redis.call('HEXISTS', KEYS[3], job_id) == 1 then
        redis.call('LREM', KEYS[1], 1, job_id)
        redis.call('ZREM', KEYS[2], job_id)
        redis.call('RPUSH', KEYS[4], job_id)
        out[1] = out[1] + 1
    else
        out[#out + 1] = job_id
    end
end
return out
