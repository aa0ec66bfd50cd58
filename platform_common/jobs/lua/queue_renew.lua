-- Renew the leases of the jobs one worker is running, each fenced by its token.
-- KEYS[1] leases zset; KEYS[1+i] job hash of job i
-- ARGV[1] lease ms; ARGV[2i] job id of job i, ARGV[2i+1] its lease token
-- Returns the job ids whose lease is lost: the token no longer owns the job (the
-- reaper took it, it expired, or another attempt holds it now).
-- An attempt that this token already ended is not lost: complete and fail keep the
-- token on the record and leave 'running', so a renewal that reaches Redis after the
-- worker's own completion or failure (the worker cannot know which arrives first)
-- just skips that job. Every path that takes a job from its worker (reaper, expiry,
-- release, requeue) deletes the token or hands out a new one, so fencing is unchanged.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + tonumber(ARGV[1])
local lost = {}
for i = 1, #KEYS - 1 do
    local job_id = ARGV[2 * i]
    local f = redis.call('HMGET', KEYS[1 + i], 'state', 'token')
    if f[2] ~= ARGV[2 * i + 1] then
        lost[#lost + 1] = job_id
    elseif f[1] == 'running' then
        redis.call('ZADD', KEYS[1], 'XX', deadline, job_id)
    end
    -- else: this attempt already ended (succeeded, retrying, failed, dead): nothing to do
end
return lost
