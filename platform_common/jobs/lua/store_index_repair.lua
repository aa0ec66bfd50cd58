-- Time index repair: remove the entries of one bucket whose record is gone (TTL),
-- was re-created (another created_at), belongs to another owner or is not a hash.
-- KEYS[1]     the bucket's index
-- KEYS[2..n]  the record of each entry, in the order of ARGV[2..n]
-- ARGV[1]     the bucket's owner_oid ("" = shared)
-- ARGV[2..n]  the entries ("<created_at us>:<job_id>")
-- Returns the number of entries removed. Every record is read and judged first, the
-- removals come after: a record that cannot be read as a hash is a verdict, never an
-- error halfway through the writes.
local index_kind = redis.call('TYPE', KEYS[1])['ok']
if index_kind ~= 'zset' then
  return 0  -- nothing to repair: no sorted set, no entries
end
local stale = {}
for i = 2, #KEYS do
  local entry = ARGV[i]
  local keep = false
  if redis.call('TYPE', KEYS[i])['ok'] == 'hash' then
    local fields = redis.call('HMGET', KEYS[i], 'created_at', 'owner_oid')
    if fields[1] and (fields[2] or '') == ARGV[1] then
      local sec, usec = string.match(fields[1], '^(%d+)%.(%d%d%d%d%d%d)$')
      keep = sec ~= nil and #sec <= 10 and
        (string.format('%010d', tonumber(sec)) .. usec .. ':' .. string.sub(entry, 18)) == entry
    end
  end
  if not keep then
    table.insert(stale, entry)
  end
end
local removed = 0
for _, entry in ipairs(stale) do
  removed = removed + redis.call('ZREM', KEYS[1], entry)
end
return removed
