-- JobStore create: write a new record with its TTL (and its time-index entry) in one step.
-- KEYS[1]  the record hash                       agentjobs:{agent}:<job_id>
-- KEYS[2]  optional: the owner's time index      agentjobs:{agent}:_idx:<bucket>
-- ARGV[1]  status
-- ARGV[2]  payload as JSON
-- ARGV[3]  TTL in seconds (decimal digits, at most 9: what EXPIRE always accepts)
-- ARGV[4]  owner_oid ("" = shared)
-- ARGV[5]  job_id (the index member is "<created_at in us, 16 digits>:<job_id>")
-- Returns {"ok", created_at}, {"ok", created_at, "index_skipped"} (KEYS[2] holds another
-- type: the record is written without its entry), or, writing nothing, {"conflict"} or
-- {"invalid", argument name}.
-- Redis does not undo a script that fails midway, so every check that can fail runs
-- before the first write, and what follows (HSET of a new key, EXPIRE with a checked
-- TTL, ZADD to a sorted set) cannot fail.
-- @include store_time
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'conflict'}
end
if not string.match(ARGV[3], '^[1-9]%d?%d?%d?%d?%d?%d?%d?%d?$') then
  return {'invalid', 'ttl_seconds'}
end
-- The index is derived data (the backfill rebuilds it, and a listing whose bucket cannot
-- be read falls back to the scan), so a corrupt bucket must not block the primary write:
-- the record goes in without its entry and the caller counts the skip.
local index = KEYS[2]
if index then
  local kind = redis.call('TYPE', index)['ok']
  if kind ~= 'zset' and kind ~= 'none' then
    index = nil
  end
end
local created, seconds, usec = store_time()
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'payload', ARGV[2], 'created_at', created,
  'updated_at', created, 'version', '1', 'owner_oid', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[3])
if index then
  redis.call('ZADD', index, 0, string.format('%010d', tonumber(seconds)) .. usec .. ':' .. ARGV[5])
elseif KEYS[2] then
  return {'ok', created, 'index_skipped'}
end
return {'ok', created}
