-- An integer as Redis stores one (what HINCRBY, EXPIRE and SET EX read: no exponent, no
-- space), at most 15 characters so that Lua's double holds it exactly and its ms still
-- fit in 64 bits, or nil. It reads a leading zero ("007") and "-0", which HINCRBY and
-- SET EX refuse: a caller that writes the stored text back checks for those itself.
local function int(value)
    if type(value) == 'string' and #value <= 15 and string.find(value, '^%-?%d+$') then
        return tonumber(value)
    end
    return nil
end

-- A stored count HINCRBY accepts: Redis' own integer text (HINCRBY refuses a leading
-- zero, "007", and "-0", which int() reads), 18 digits at most so that adding a batch to
-- it cannot overflow 64 bits.
local function count(value)
    return #value <= 18 and (value == '0' or string.find(value, '^%-?[1-9]%d*$') ~= nil)
end
