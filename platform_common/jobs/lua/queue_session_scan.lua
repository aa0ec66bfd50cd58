-- Find the live jobs of one user session in one agent type (queue/cancel.py,
-- cancel_session): one step of a walk over the type's waiting packed jobs (HSCAN of the
-- queued hash) and over its jobs that have a job hash (ZSCAN of the expiry set, which
-- holds every unfinished one: claimed, delayed, requeued). No index is kept for it, so an
-- enqueue pays nothing; a cancel_session costs a read of each live job of the type.
-- Read only.
-- KEYS[1] queued hash   KEYS[2] expiry zset
-- ARGV[1] the queued hash's cursor ("0" to start)   ARGV[2] the expiry set's cursor
-- ARGV[3] the needle: '"session_id":' .. the session id as JSON (how the payload holds it)
-- ARGV[4] the session id   ARGV[5] COUNT per scan   ARGV[6] job key prefix (the key of job
-- x: prefix .. x; on a cluster the same slot as KEYS, the type's hash tag)
-- Returns {queued cursor, expiry cursor, job id...}: the cursors to send next ("done" for
-- a side whose walk has ended: send it back as it is), then the ids found in this step. A payload that holds the needle is decoded to confirm its
-- session_id (the needle could sit in another field's value).
-- @include key_types
-- @include packed_header
local refusal = wrong_types({{1, 'hash'}, {2, 'zset'}})
if refusal then
    return refusal
end
local needle, sid, count, prefix = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local found = {}
local function confirm(job_id, payload)
    if payload and string.find(payload, needle, 1, true) then
        local ok, decoded = pcall(cjson.decode, payload)
        if ok and type(decoded) == 'table' and decoded.session_id == sid then
            found[#found + 1] = job_id
        end
    end
end
local queued_cursor, expiry_cursor = ARGV[1], ARGV[2]
if queued_cursor ~= 'done' then
    local page = redis.call('HSCAN', KEYS[1], queued_cursor, 'COUNT', count)
    queued_cursor = page[1] == '0' and 'done' or page[1]
    local entries = page[2]
    for e = 1, #entries, 2 do
        local job = unpack_packed(entries[e + 1])
        confirm(entries[e], job and job[7])
    end
end
if expiry_cursor ~= 'done' then
    local page = redis.call('ZSCAN', KEYS[2], expiry_cursor, 'COUNT', count)
    expiry_cursor = page[1] == '0' and 'done' or page[1]
    local entries = page[2]
    for e = 1, #entries, 2 do
        local payload = redis.pcall('HGET', prefix .. entries[e], 'payload')
        if type(payload) == 'string' then
            confirm(entries[e], payload)
        end
    end
end
local out = {queued_cursor, expiry_cursor}
for _, job_id in ipairs(found) do
    out[#out + 1] = job_id
end
return out
