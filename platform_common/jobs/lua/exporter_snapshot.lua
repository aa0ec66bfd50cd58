#!lua flags=no-writes
-- exporter_snapshot: everything the exporter shows for one agent type, read in one
-- atomic, read-only step (run with EVALSHA_RO; one call per type, all pipelined).
--
-- KEYS[1] queue LIST        KEYS[2] processing LIST   KEYS[3] delayed ZSET
-- KEYS[4] dead LIST         KEYS[5] stats HASH        KEYS[6] workers ZSET
-- ARGV[1] job hash key prefix, e.g. "jobs:{dining}:job:"
-- ARGV[2] heartbeat window in ms: a worker is active if its last beat is newer
--
-- The oldest job's hash is the only key not in KEYS: its id is known only after
-- LINDEX. It shares the type's hash tag with KEYS[1], so it is on the same slot.
--
-- Returns {now_ms, queue_len, processing_len, delayed_len, dead_len, stats (flat
-- HGETALL), active_workers, newest_heartbeat_score or nil, oldest_enqueued_at or nil}.
-- Scores are returned as strings: Lua numbers would be truncated to integers.

local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local oldest_enqueued_at = false
local oldest_id = redis.call('LINDEX', KEYS[1], -1)
if oldest_id then
  oldest_enqueued_at = redis.call('HGET', ARGV[1] .. oldest_id, 'enqueued_at')
end

local newest_heartbeat = false
local newest = redis.call('ZREVRANGE', KEYS[6], 0, 0, 'WITHSCORES')
if newest[2] then
  newest_heartbeat = newest[2]
end

local active = redis.call('ZCOUNT', KEYS[6], '(' .. (now_ms - tonumber(ARGV[2])), '+inf')

return {
  now_ms,
  redis.call('LLEN', KEYS[1]),
  redis.call('LLEN', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
  redis.call('LLEN', KEYS[4]),
  redis.call('HGETALL', KEYS[5]),
  active,
  newest_heartbeat,
  oldest_enqueued_at,
}
