-- Record one sample of an agent type's counters and depths for the current minute of
-- Redis' clock, unless one was recorded in it already (any number of workers call this
-- once a minute: the first writes, the others find its sample), and trim the history
-- to its last `kept` minutes in the same call.
-- KEYS[1] history stream  KEYS[2] stats hash  KEYS[3] queued hash  KEYS[4] waiting zset
-- KEYS[5] processing list  KEYS[6] delayed zset  KEYS[7] dead list
-- ARGV[1] the time in ms to sample at ("": Redis TIME; a test drives its minutes here)
-- ARGV[2] minutes kept (>= 1)  ARGV[3...] the counter fields of the stats hash
-- The entry's id is the minute's start (ms) with sequence 0; its fields: `at` (the ms it
-- was read at), each counter as stored (a missing one is 0; one that is not an integer
-- is left out: the history shows that counter's gap), then queued (packed plus waiting
-- with a job hash), running, delayed and dead.
-- Returns {1 if it wrote a sample else 0, ms until the next minute starts}.
-- All-or-nothing: a key of another type is refused with the error reply
-- "CORRUPT <position in KEYS> <problem>" before the first write (the only write is the
-- XADD, which trims with it); nothing after the checks can fail.
-- @include time
-- @include key_types
-- @include numbers
local refusal = wrong_type(1, 'stream')
if refusal then
    return refusal
end
-- The caller's arguments (a constant and the queue's own field names): wrong, a bug.
local kept = int(ARGV[2])
local now = ARGV[1] == '' and now_ms() or int(ARGV[1])
if not (kept and kept >= 1 and now and now >= 60000) then
    return redis.error_reply('ERR history: bad time or kept minutes; nothing was changed')
end
local minute = now - now % 60000
local next_in = minute + 60000 - now

-- A sample of this minute (or, after Redis' clock stepped back, of a later one) exists:
-- the new one would not be the newest entry, which XADD refuses. Nothing to do.
local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #newest > 0 then
    local newest_ms = tonumber(string.match(newest[1][1], '^(%d+)'))
    if newest_ms >= minute then
        return {0, next_in}
    end
end

-- The keys read below, checked only by the call that writes (the others return above).
refusal = wrong_types({{2, 'hash'}, {3, 'hash'}, {4, 'zset'}, {5, 'list'}, {6, 'zset'},
    {7, 'list'}})
if refusal then
    return refusal
end

local sample = {'at', string.format('%d', now)}
local counters = {unpack(ARGV, 3)}
local stored = redis.call('HMGET', KEYS[2], unpack(counters))
for i, name in ipairs(counters) do
    local value = stored[i] or '0'
    if int(value) then
        sample[#sample + 1] = name
        sample[#sample + 1] = value
    end
end
local queued = redis.call('HLEN', KEYS[3]) + redis.call('ZCARD', KEYS[4])
local depths = {'queued', queued, 'running', redis.call('LLEN', KEYS[5]),
    'delayed', redis.call('ZCARD', KEYS[6]), 'dead', redis.call('LLEN', KEYS[7])}
for _, item in ipairs(depths) do
    sample[#sample + 1] = item
end
-- MINID keeps the entries of the last `kept` minutes, this one included: at most `kept`.
redis.call('XADD', KEYS[1], 'MINID', string.format('%d', minute - (kept - 1) * 60000),
    string.format('%d-0', minute), unpack(sample))
return {1, next_in}
