-- What fair share's waiting keys look like, for the exporter (exporter/fair_share.py):
-- the ring's length and, for at most ARGV[1] of its entries, each fairness key's backlog
-- and the enqueue time of its oldest waiting job. Read only (EVAL_RO), bounded: at most
-- ARGV[1] keys, and at most ARGV[4] ids walked per key.
-- KEYS[1] the ring (fair)   KEYS[2] the queued hash
-- ARGV[1] the most ring entries to read (from the left; the claim takes from the right,
-- so the keys it reaches last)   ARGV[2] the per-key list prefix (the list of key k:
-- prefix .. k, keys.py `fair:q:<key>`)   ARGV[3] the job key prefix (job x: prefix .. x)
-- ARGV[4] the most ids walked per key past strays (ids of jobs that expired or were
-- cancelled while they waited: in neither `queued` nor a job hash)
-- Both prefixes carry the type's hash tag, so every key read is in KEYS' slot.
-- Returns {ring length, Redis TIME ms, 1 when the shared entry (FAIR_SHARED_ENTRY, "")
-- is on the ring else 0, per-key lists of another type skipped, then per key read:
-- key, backlog (LLEN of its list), its oldest waiting job's enqueued_at ms (as stored: a
-- string of digits) or false when none of the ids walked is a waiting job}. The ring or
-- the queued hash of another type is refused: CORRUPT <position> <problem>.
-- @include time
-- @include key_types
local refusal = wrong_types({{1, 'list'}, {2, 'hash'}})
if refusal then
    return refusal
end
local limit, list_prefix, job_prefix, walk = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4])
local ring_length = redis.call('LLEN', KEYS[1])
local out = {ring_length, now_ms(), 0, 0}
if ring_length == 0 then
    return out
end
if redis.call('LPOS', KEYS[1], '') then
    out[3] = 1
end

-- The enqueue time (ms, digits) of waiting job `job_id`, or nil for a stray: packed in
-- `queued` (its header's first field), else its job hash's enqueued_at.
local function enqueued_at(job_id)
    local packed = redis.call('HGET', KEYS[2], job_id)
    if packed then
        return string.match(packed, '^(%d+),')
    end
    local stored = redis.pcall('HGET', job_prefix .. job_id, 'enqueued_at')
    if type(stored) == 'string' and string.find(stored, '^%d+$') then
        return stored
    end
    return nil
end

local entries = redis.call('LRANGE', KEYS[1], 0, limit - 1)
for _, key in ipairs(entries) do
    if key ~= '' then
        local list = list_prefix .. key
        local kind = redis.call('TYPE', list).ok
        if kind == 'list' then
            local ids = redis.call('LRANGE', list, -walk, -1)
            local oldest = false
            -- The oldest id is at the tail (LPUSH in): walk from it past strays.
            for i = #ids, 1, -1 do
                local at = enqueued_at(ids[i])
                if at then
                    oldest = at
                    break
                end
            end
            out[#out + 1] = key
            out[#out + 1] = redis.call('LLEN', list)
            out[#out + 1] = oldest
        elseif kind == 'none' then
            -- On the ring with nothing waiting (a hand-edited ring): no backlog, no age.
            out[#out + 1] = key
            out[#out + 1] = 0
            out[#out + 1] = false
        else
            out[4] = out[4] + 1
        end
    end
end
return out
