-- Renew the leases of the jobs one worker is running, each fenced by its token.
-- KEYS[1] leases zset; KEYS[1+i] job hash of job i
-- ARGV[1] lease ms; ARGV[2i] job id of job i, ARGV[2i+1] its lease token
-- Returns the job ids whose lease is lost: the token no longer owns the job (the
-- reaper took it, it expired, or another attempt holds it now; or its key holds
-- something else than a job, which no token owns).
-- An attempt that this token already ended is not lost: complete and fail keep the
-- token on the record and leave 'running', so a renewal that reaches Redis after the
-- worker's own completion or failure (the worker cannot know which arrives first)
-- just skips that job. Every path that takes a job from its worker (reaper, expiry,
-- release, requeue) deletes the token or hands out a new one, so fencing is unchanged.
-- All reads come first and the one write is a single ZADD, so a leases key of another
-- type fails it before anything is written.
-- @include time
local now = now_ms()
local deadline = now + tonumber(ARGV[1])
local lost = {}
local renewed = {}
for i = 1, #KEYS - 1 do
    local job_id = ARGV[2 * i]
    local f = redis.pcall('HMGET', KEYS[1 + i], 'state', 'token')
    if f.err or f[2] ~= ARGV[2 * i + 1] then
        lost[#lost + 1] = job_id
    elseif f[1] == 'running' then
        renewed[#renewed + 1] = deadline
        renewed[#renewed + 1] = job_id
    end
    -- else: this attempt already ended (succeeded, retrying, failed, dead): nothing to do
end
if #renewed > 0 then
    redis.call('ZADD', KEYS[1], 'XX', unpack(renewed))
end
return lost
