-- @include numbers
-- @include key_types
-- A script reads each counter it bumps (HINCRBY) before its first write: HINCRBY refuses
-- a value that is not an integer in Redis' own text (count), which would fail the script
-- halfway.

-- The refusal "CORRUPT <index> field <field> is not an integer: ..." of the first of
-- `fields` of the hash KEYS[index] whose count HINCRBY would refuse, or of the hash
-- holding another type, else nil. `values`: the fields as an HMGET (redis.pcall) read
-- them, or nil to read them here.
local function counts_refusal(index, fields, values)
    values = values or redis.pcall('HMGET', KEYS[index], unpack(fields))
    if failed(values) then
        return wrong_type(index, 'hash') or values
    end
    for i, field in ipairs(fields) do
        if values[i] and not count(values[i]) then
            return corrupt(index, 'field ' .. field .. ' is not an integer: ' .. shown(values[i]))
        end
    end
    return nil
end

-- The same for one field, read by HGET.
local function count_refusal(index, field)
    local value = redis.pcall('HGET', KEYS[index], field)
    return counts_refusal(index, {field}, failed(value) and value or {value})
end
