-- JobStore update: check version and transition, change the given fields, bump the version.
-- The remaining TTL is kept (HSET does not touch it) unless ARGV[6] asks for a new one.
-- KEYS[1]  the record hash
-- ARGV[1]  new status, "" = unchanged
-- ARGV[2]  the statuses ARGV[1] may be reached from, as ",pending,running,"
-- ARGV[3]  payload JSON, "" = unchanged
-- ARGV[4]  result JSON, "" = unchanged
-- ARGV[5]  error: "" = unchanged, else "=" followed by the error text
-- ARGV[6]  TTL in seconds, "" = keep the remaining TTL
-- ARGV[7]  expected version, "" = any
-- Returns {"ok", field, value, ...} (the whole hash after the write), or, writing nothing:
-- {"missing"}, {"version", stored version}, {"illegal", current status},
-- {"malformed", field name}.
local current = redis.call('HMGET', KEYS[1], 'status', 'version')
if not current[1] then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return {'missing'}
  end
  return {'malformed', 'status'}
end
local version = tonumber(current[2] or '')
if not version then
  return {'malformed', 'version'}
end
if ARGV[7] ~= '' and version ~= tonumber(ARGV[7]) then
  return {'version', current[2]}
end
if ARGV[1] ~= '' and not string.find(ARGV[2], ',' .. current[1] .. ',', 1, true) then
  return {'illegal', current[1]}
end
local now = redis.call('TIME')
local fields = {
  'version', string.format('%d', version + 1),
  'updated_at', now[1] .. '.' .. string.format('%06d', tonumber(now[2])),
}
if ARGV[1] ~= '' then
  table.insert(fields, 'status'); table.insert(fields, ARGV[1])
end
if ARGV[3] ~= '' then
  table.insert(fields, 'payload'); table.insert(fields, ARGV[3])
end
if ARGV[4] ~= '' then
  table.insert(fields, 'result'); table.insert(fields, ARGV[4])
end
if ARGV[5] ~= '' then
  table.insert(fields, 'error'); table.insert(fields, string.sub(ARGV[5], 2))
end
redis.call('HSET', KEYS[1], unpack(fields))
if ARGV[6] ~= '' then
  redis.call('EXPIRE', KEYS[1], ARGV[6])
end
local all = redis.call('HGETALL', KEYS[1])
table.insert(all, 1, 'ok')
return all
