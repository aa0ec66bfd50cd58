-- Time index backfill: upsert the entry of one record (idempotent, safe under traffic).
-- KEYS[1]  the record hash
-- KEYS[2]  the time index of the owner the caller read from the record
-- ARGV[1]  that owner_oid
-- ARGV[2]  job_id
-- ARGV[3]  "1" for a dry run (only report what would be done)
-- Returns 1 (added), 0 (already present), -1 (record gone), -2 (malformed: not a hash, or
-- no created_at of the form create writes), -3 (the record now has another owner), -4
-- (KEYS[2] holds another type than a sorted set). Only 1 writes, and only after every
-- check: ZADD to a sorted set cannot fail.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return -1
end
if kind ~= 'hash' then
  return -2
end
local fields = redis.call('HMGET', KEYS[1], 'owner_oid', 'created_at')
if not fields[2] then
  return -2
end
if (fields[1] or '') ~= ARGV[1] then
  return -3
end
-- 10 digits of seconds at most (what create writes until the year 2286): tonumber is
-- exact, and the member never holds exponent notation or an overflowed number.
local sec, usec = string.match(fields[2], '^(%d+)%.(%d%d%d%d%d%d)$')
if not sec or #sec > 10 then
  return -2
end
local index_kind = redis.call('TYPE', KEYS[2])['ok']
if index_kind ~= 'zset' and index_kind ~= 'none' then
  return -4
end
local entry = string.format('%010d', tonumber(sec)) .. usec .. ':' .. ARGV[2]
if redis.call('ZSCORE', KEYS[2], entry) then
  return 0
end
if ARGV[3] ~= '1' then
  redis.call('ZADD', KEYS[2], 0, entry)
end
return 1
