-- JobStore delete: remove the record and, when given, its time-index entry, in one step.
-- KEYS[1]  the record hash
-- KEYS[2]  optional: the time index of the owner the caller read from the record
-- ARGV[1]  that owner_oid (with KEYS[2])
-- ARGV[2]  job_id
-- Returns 1 (deleted), 0 (did not exist) or -1 (the record now has another owner:
-- it was re-created; nothing deleted, the caller reads the owner again).
if KEYS[2] then
  local fields = redis.call('HMGET', KEYS[1], 'owner_oid', 'created_at')
  if not fields[2] and redis.call('EXISTS', KEYS[1]) == 0 then
    return 0
  end
  if (fields[1] or '') ~= ARGV[1] then
    return -1
  end
  local sec, usec = string.match(fields[2] or '', '^(%d+)%.(%d%d%d%d%d%d)$')
  if sec then
    redis.call('ZREM', KEYS[2], string.format('%010d', tonumber(sec)) .. usec .. ':' .. ARGV[2])
  end
end
return redis.call('DEL', KEYS[1])
