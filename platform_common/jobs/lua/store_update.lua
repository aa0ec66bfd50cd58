-- JobStore update: change the given fields of the record version the caller validated.
-- The caller has read the whole hash and parsed it (a malformed record is refused there,
-- before anything is written); this script writes only if the record is still that one
-- (same version and created_at), so what it writes lands on a record known to be valid
-- and the caller can answer the new record without parsing anything after the write.
-- Version checks, transitions and every field check happen in the caller, against that
-- read. The remaining TTL is kept (HSET does not touch it) unless ARGV[7] asks for one.
-- KEYS[1]  the record hash
-- ARGV[1]  the stored version the caller read (its exact text)
-- ARGV[2]  the stored created_at the caller read (its exact text)
-- ARGV[3]  the new version (decimal digits: computed by the caller, never by Lua, whose
--          numbers are doubles and would write a large one as "1e+21")
-- ARGV[4]  new status, "" = unchanged
-- ARGV[5]  payload JSON, "" = unchanged
-- ARGV[6]  result JSON, "" = unchanged
-- ARGV[7]  error: "" = unchanged, else "=" followed by the error text
-- ARGV[8]  TTL in seconds (at most 9 digits), "" = keep the remaining TTL
-- Returns {"ok", updated_at}, or, writing nothing: {"missing"}, {"moved"} (the record is
-- no longer the one the caller read: read it again) or {"invalid", argument name}.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  return {'missing'}
end
if kind ~= 'hash' then
  return {'moved'}
end
local current = redis.call('HMGET', KEYS[1], 'version', 'created_at')
if current[1] ~= ARGV[1] or current[2] ~= ARGV[2] then
  return {'moved'}
end
if not string.match(ARGV[3], '^[1-9]%d*$') then
  return {'invalid', 'version'}
end
if ARGV[8] ~= '' and not string.match(ARGV[8], '^[1-9]%d?%d?%d?%d?%d?%d?%d?%d?$') then
  return {'invalid', 'ttl_seconds'}
end
local now = redis.call('TIME')
local updated = now[1] .. '.' .. string.format('%06d', tonumber(now[2]))
local fields = {'version', ARGV[3], 'updated_at', updated}
if ARGV[4] ~= '' then
  table.insert(fields, 'status'); table.insert(fields, ARGV[4])
end
if ARGV[5] ~= '' then
  table.insert(fields, 'payload'); table.insert(fields, ARGV[5])
end
if ARGV[6] ~= '' then
  table.insert(fields, 'result'); table.insert(fields, ARGV[6])
end
if ARGV[7] ~= '' then
  table.insert(fields, 'error'); table.insert(fields, string.sub(ARGV[7], 2))
end
redis.call('HSET', KEYS[1], unpack(fields))
if ARGV[8] ~= '' then
  redis.call('EXPIRE', KEYS[1], ARGV[8])
end
return {'ok', updated}
