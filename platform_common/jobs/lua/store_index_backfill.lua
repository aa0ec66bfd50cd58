-- Time index backfill: upsert the entry of one record (idempotent, safe under traffic).
-- KEYS[1]  the record hash
-- KEYS[2]  the time index of the owner the caller read from the record
-- ARGV[1]  that owner_oid
-- ARGV[2]  job_id
-- ARGV[3]  "1" for a dry run (only report what would be done)
-- Returns 1 (added), 0 (already present), -1 (record gone), -2 (malformed created_at),
-- -3 (the record now has another owner).
local fields = redis.call('HMGET', KEYS[1], 'owner_oid', 'created_at')
if not fields[2] then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return -1
  end
  return -2
end
if (fields[1] or '') ~= ARGV[1] then
  return -3
end
local sec, usec = string.match(fields[2], '^(%d+)%.(%d%d%d%d%d%d)$')
if not sec then
  return -2
end
local entry = string.format('%010d', tonumber(sec)) .. usec .. ':' .. ARGV[2]
if redis.call('ZSCORE', KEYS[2], entry) then
  return 0
end
if ARGV[3] ~= '1' then
  redis.call('ZADD', KEYS[2], 0, entry)
end
return 1
