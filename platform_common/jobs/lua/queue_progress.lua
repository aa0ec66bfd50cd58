-- Store a running job's progress report, fenced by its lease token, and publish it.
-- KEYS[1] job hash
-- ARGV[1] job id  ARGV[2] lease token  ARGV[3] the report: one JSON object (encoded)
-- ARGV[4] the largest report accepted, bytes  ARGV[5] the type's progress channel
-- Publishes on ARGV[5]
--   {"job_id":<id>,"at":<ms>,"progress":<the report>}
-- then writes the job hash's fields `progress` (ARGV[3] as given) and `progress_at`
-- (Redis ms), replacing the last report.
-- Returns {'ok', at ms}; {'lost', state} when the token no longer owns a running job
-- (another attempt holds it, it ended, it expired: nothing written); the error
-- 'ERR progress ...' for a report that is not one JSON object of at most ARGV[4] bytes;
-- 'CORRUPT 1 ...' when the job key holds another type. Every check comes before the
-- first write, so a refused call writes nothing and publishes nothing (at maxmemory,
-- which refuses the HSET alone, the event is out and the report not stored: the worker
-- sends it again).
-- @include time
-- @include replies
-- @include key_types
local report = ARGV[3]
local limit = tonumber(ARGV[4])
if not limit or #report > limit then
    return redis.error_reply('ERR progress is ' .. #report .. ' bytes, over the limit of '
        .. tostring(ARGV[4]) .. '; nothing was written')
end
-- One JSON object: an object's text starts with '{' (after white space), and cjson reads
-- the whole text (trailing garbage, a nesting past its limit of 1000 fail it).
local parsed, value = pcall(cjson.decode, report)
if not parsed or type(value) ~= 'table' or not string.find(report, '^%s*{') then
    return redis.error_reply('ERR progress is not one JSON object; nothing was written')
end
local f = redis.pcall('HMGET', KEYS[1], 'state', 'token')
if failed(f) then
    return wrong_type(1, 'hash') or f
end
local state = f[1]
if f[2] ~= ARGV[2] or state ~= 'running' then
    return {'lost', state or 'missing'}
end
local now = string.format('%d', now_ms())
-- The event goes first: a user whose ACL refuses the channel is refused here, before
-- the write (the event carries the report, so no reader depends on the order).
redis.call('PUBLISH', ARGV[5],
    '{"job_id":' .. cjson.encode(ARGV[1]) .. ',"at":' .. now .. ',"progress":' .. report .. '}')
redis.call('HSET', KEYS[1], 'progress', report, 'progress_at', now)
return {'ok', now}
