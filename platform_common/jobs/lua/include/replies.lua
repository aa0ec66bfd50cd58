-- A stored value as a problem text shows it: quoted when short and printable, else only
-- whether there is one.
local function shown(raw)
    if type(raw) == 'string' and #raw <= 40 and string.find(raw, '^[%w%p ]*$') then
        return "'" .. raw .. "'"
    end
    return raw and 'unprintable' or 'missing'
end

-- The refusal "CORRUPT <position in KEYS> <problem>", which the client raises as
-- CorruptQueueState naming that key (queue/connection.py).
local function corrupt(index, problem)
    return redis.error_reply('CORRUPT ' .. index .. ' ' .. problem)
end

-- Whether a redis.pcall reply is an error.
local function failed(reply)
    return type(reply) == 'table' and reply.err ~= nil
end
