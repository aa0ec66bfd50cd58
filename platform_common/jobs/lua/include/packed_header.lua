-- A job packed in one value of the queued hash, as lua/queue_enqueue.lua writes it
-- (queue/envelope.py, whose unpack_queued reads the same layout):
--   <enqueued_at>,<expires_at>,<ttl>,<max_attempts>,<nonce>[,o|,h|,l]\n<trace context>\n<payload>
-- Returns {enqueued_at, expires_at, ttl, max_attempts, nonce, trace context, payload,
-- ordered = whether ",o" ends the header, level = "h" or "l" for a job of priority
-- high or low (",h", ",l"), nil for normal}, the numbers as their stored digits (of any
-- length: each caller bounds the ones it computes with or writes); or, for a value of
-- another layout, nil and its enqueued_at digits if those still read (so that its
-- arrival second can still be counted down). A value written before priorities (no
-- level) reads as a normal one.
local function unpack_packed(value)
    local enq, exp, ttl, max, nonce, order, trace, at = string.match(value,
        '^(%d+),(%d+),(%d+),(%d+),([^,\n]*)([^\n]*)\n([^\n]*)\n()')
    if not enq or (order ~= '' and order ~= ',o' and order ~= ',h' and order ~= ',l') then
        return nil, string.match(value, '^(%d+),')
    end
    return {enq, exp, ttl, max, nonce, trace, string.sub(value, at), ordered = order == ',o',
        level = (order == ',h' and 'h') or (order == ',l' and 'l') or nil}
end
