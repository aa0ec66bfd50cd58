-- JobStore create: write a new record with its TTL (and its time-index entry) in one step.
-- KEYS[1]  the record hash                       agentjobs:{agent}:<job_id>
-- KEYS[2]  optional: the owner's time index      agentjobs:{agent}:_idx:<bucket>
-- ARGV[1]  status
-- ARGV[2]  payload as JSON
-- ARGV[3]  TTL in seconds
-- ARGV[4]  owner_oid ("" = shared)
-- ARGV[5]  job_id (the index member is "<created_at in us, 16 digits>:<job_id>")
-- Returns {"ok", created_at} or {"conflict"} (nothing written).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'conflict'}
end
local now = redis.call('TIME')
local usec = string.format('%06d', tonumber(now[2]))
local created = now[1] .. '.' .. usec
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'payload', ARGV[2], 'created_at', created,
  'updated_at', created, 'version', '1', 'owner_oid', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[3])
if KEYS[2] then
  redis.call('ZADD', KEYS[2], 0, string.format('%010d', tonumber(now[1])) .. usec .. ':' .. ARGV[5])
end
return {'ok', created}
