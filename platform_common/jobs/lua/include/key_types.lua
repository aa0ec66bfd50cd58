-- @include replies
-- The refusal of KEYS[index] when it holds another type than `kind` (a missing key is
-- none), else nil: a script checks each key it writes before its first write, because a
-- write to a key of another type fails the script halfway and Redis keeps what it wrote.
local function wrong_type(index, kind)
    local found = redis.call('TYPE', KEYS[index]).ok
    if found ~= kind and found ~= 'none' then
        return corrupt(index, 'holds a ' .. found .. ', where the queue keeps a ' .. kind)
    end
    return nil
end

-- The refusal of the first of `expected`, {{position in KEYS, type}, ...}, that holds
-- another type, else nil.
local function wrong_types(expected)
    for _, key in ipairs(expected) do
        local refusal = wrong_type(key[1], key[2])
        if refusal then
            return refusal
        end
    end
    return nil
end

-- The refusal of `key`, a key in no KEYS (a job key a take reads, a fairness key's list),
-- when it holds another type than `kind` (a missing key is none), else nil: "CORRUPT 0
-- <key> holds a ...", which the client reads by the key's name (backend_errors.py).
local function named_wrong_type(key, kind)
    local found = redis.call('TYPE', key).ok
    if found ~= kind and found ~= 'none' then
        return redis.error_reply('CORRUPT 0 ' .. key .. ' holds a ' .. found
            .. ', where the queue keeps a ' .. kind)
    end
    return nil
end
