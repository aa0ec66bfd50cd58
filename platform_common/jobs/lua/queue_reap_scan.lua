-- Find the jobs whose lease expired (their worker is gone), for queue_fail's "lost" mode.
-- A job a worker moved into the processing list but never claimed (it died in between)
-- has no lease yet: give it a provisional one, so it is found once that one expires too.
-- KEYS[1] processing list  KEYS[2] leases zset
-- ARGV[1] provisional lease ms  ARGV[2] how many entries of processing to inspect (the
-- oldest)  ARGV[3] the most expired job ids to return
-- Returns the expired job ids, oldest deadline first.
-- All or nothing without checks of its own: LRANGE reads first, and the one write is
-- a single ZADD, so a key of another type fails the call before anything is written.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
return redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
