-- Pause or resume one agent type: while its paused key exists the claim starts no job of
-- the type (lua/queue_claim.lua). The key holds the Redis time (ms) it was paused at.
-- KEYS[1] the type's paused key (a string)
-- ARGV[1] "pause" or "resume"
-- Returns {changed, since}: changed is 1 when this call paused (resumed) the type, 0 when
-- it was paused (running) already; since is the time (ms) the type is (pause) or was
-- (resume) paused at, as stored, or nil when it was running.
-- A paused key of another type is refused with the error reply "CORRUPT 1 <problem>"
-- before anything is written.
-- @include time
-- @include key_types
local since = redis.pcall('GET', KEYS[1])
if failed(since) then
    return wrong_type(1, 'string') or since
end
if ARGV[1] == 'pause' then
    if since then
        return {0, since}
    end
    local now = string.format('%d', now_ms())
    redis.call('SET', KEYS[1], now)
    return {1, now}
elseif ARGV[1] == 'resume' then
    if not since then
        return {0, false}
    end
    redis.call('DEL', KEYS[1])
    return {1, since}
end
return redis.error_reply('ERR queue_pause: ARGV[1] must be "pause" or "resume"')
