-- Time index repair: remove the entries of one bucket whose record is gone (TTL),
-- was re-created (another created_at) or belongs to another owner.
-- KEYS[1]     the bucket's index
-- KEYS[2..n]  the record of each entry, in the order of ARGV[2..n]
-- ARGV[1]     the bucket's owner_oid ("" = shared)
-- ARGV[2..n]  the entries ("<created_at us>:<job_id>")
-- Returns the number of entries removed.
local removed = 0
for i = 2, #KEYS do
  local entry = ARGV[i]
  local fields = redis.call('HMGET', KEYS[i], 'created_at', 'owner_oid')
  local keep = false
  if fields[1] and (fields[2] or '') == ARGV[1] then
    local sec, usec = string.match(fields[1], '^(%d+)%.(%d%d%d%d%d%d)$')
    keep = sec ~= nil and
      (string.format('%010d', tonumber(sec)) .. usec .. ':' .. string.sub(entry, 18)) == entry
  end
  if not keep then
    removed = removed + redis.call('ZREM', KEYS[1], entry)
  end
end
return removed
