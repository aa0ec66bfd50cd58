-- JobStore delete: remove the record and, when given, its time-index entry, in one step.
-- KEYS[1]  the record (whatever it holds: delete is also how a corrupt record is cleared)
-- KEYS[2]  optional: the time index of the owner the caller read from the record
-- ARGV[1]  that owner_oid (with KEYS[2])
-- ARGV[2]  job_id
-- Returns 1 (deleted), 0 (did not exist), 2 (deleted, but KEYS[2] holds another type
-- than a sorted set, so there was no entry to remove: the caller counts it) or -1 (the
-- record now has another owner or type: it was re-created; nothing deleted, the caller
-- reads it again). Every read and check comes before DEL and ZREM, which cannot fail.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return 0
end
if not KEYS[2] then
  return redis.call('DEL', KEYS[1])
end
if kind ~= 'hash' then
  return -1
end
local fields = redis.call('HMGET', KEYS[1], 'owner_oid', 'created_at')
if (fields[1] or '') ~= ARGV[1] then
  return -1
end
local index_kind = redis.call('TYPE', KEYS[2])['ok']
if index_kind ~= 'zset' and index_kind ~= 'none' then
  redis.call('DEL', KEYS[1])
  return 2
end
-- The entry as create wrote it: 10 digits of seconds, so tonumber is exact and the
-- format never turns a huge value into exponent notation; anything else has no entry.
local sec, usec = string.match(fields[2] or '', '^(%d+)%.(%d%d%d%d%d%d)$')
if sec and #sec <= 10 and index_kind == 'zset' then
  redis.call('ZREM', KEYS[2], string.format('%010d', tonumber(sec)) .. usec .. ':' .. ARGV[2])
end
return redis.call('DEL', KEYS[1])
