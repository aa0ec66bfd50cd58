-- Redis TIME as the JobStore writes it, "<seconds>.<microseconds, 6 digits>"
-- (store/record_hash.py reads that form exactly), then its seconds and microseconds.
local function store_time()
  local t = redis.call('TIME')
  local usec = string.format('%06d', tonumber(t[2]))
  return t[1] .. '.' .. usec, t[1], usec
end
