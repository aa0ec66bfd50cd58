-- Expire the jobs packed in the queued hash (enqueued, never claimed) that wait past their
-- deadline, walking one window of the queue list from its tail (the oldest jobs). A job
-- written "in order" (",o" in its header, lua/queue_enqueue.lua) has no expiry bucket:
-- the ordered jobs of the list wait in deadline order within the expiry bucket width,
-- so the walk stops at the first ordered job not yet past its deadline (every ordered
-- job head-ward of it expires no earlier, within the bucket width). Safe to run from
-- many workers at once: every entry is re-checked here.
-- KEYS[1] queue list   KEYS[2] queued hash   KEYS[3] waiting zset   KEYS[4] stats hash
-- KEYS[5] arrivals zset   KEYS[6] arrived hash
-- KEYS[5+2i] job hash key of window entry i, KEYS[6+2i] its result key
-- ARGV[1] completion channel   ARGV[2] offset: entries at the list's tail skipped (the
-- window is LRANGE queue -(offset+n) -(offset+1))   ARGV[3] arrival bucket width (ms)
-- ARGV[3+i] the id of window entry i, in list order (head to tail), as the caller read it
-- Entries, from the tail: a packed job past its deadline is expired (counted, its result
-- stored with its ttl, published, its field and arrival count gone); an ordered job not
-- past it stops the walk; an unordered one (it has its bucket), a value that does not
-- parse (the claim deals with it), a job waiting with a job hash (queue_expire.lua
-- expires it) and a wake marker are kept; an id that is none of these is a stale entry
-- (its job ended).
-- With offset 0, the run of expired and stale entries at the very tail is removed from
-- the list; a kept entry is never removed (the stale ones head-ward of it stay, and are
-- trimmed once they reach the tail).
-- Returns {"moved"} (the window is no longer what the caller read: a worker took from
-- the tail; the caller ends its run) or {{expired job id...}, trimmed, stopped (1/0),
-- {trace context...}}: the trace context each expired job carries ('' if none), for its
-- log line.
-- All-or-nothing: a key of another type or a count that is not an integer is refused
-- with the error reply "CORRUPT <position in KEYS> <problem>" before the first write.
-- @include time
-- @include arrivals
-- @include packed_header
-- @include wake_marker
local now = now_ms()
local offset = tonumber(ARGV[2])
local arrival_ms = tonumber(ARGV[3])
local n = #ARGV - 3

-- A packed value's enqueued_at (digits), expires_at (a number), ttl (text, as SET EX
-- gets it), trace context and whether it is ordered; nil if it does not parse. Numbers of more
-- than 15 digits lose precision as Lua numbers, and SET EX refuses a ttl of 0 or with a
-- leading zero, which would fail the script after its first write: such a value is kept.
local function parse(value)
    local job = unpack_packed(value)
    if not job then
        return nil
    end
    local enq, exp, ttl = job[1], job[2], job[3]
    if #enq > 15 or #exp > 15 or #ttl > 9 or not string.find(ttl, '^[1-9]') then
        return nil
    end
    return {enq = enq, exp = tonumber(exp), ttl = ttl, trace = job[6],
        ordered = job.ordered}
end

local refusal = wrong_types({{1, 'list'}, {2, 'hash'}, {3, 'zset'}, {4, 'hash'}, {5, 'zset'},
    {6, 'hash'}}) or count_refusal(4, 'expired')
if refusal then
    return refusal
end
if n == 0 then
    return {{}, 0, 0, {}}
end
local ids = {unpack(ARGV, 4, 3 + n)}
local window = redis.call('LRANGE', KEYS[1], -(offset + n), -(offset + 1))
if #window ~= n then
    return {'moved'}
end
for i = 1, n do
    if window[i] ~= ids[i] then
        return {'moved'}
    end
end

local packed = redis.call('HMGET', KEYS[2], unpack(ids))
-- The walk, tail first: it decides every entry before anything is written.
local expired = {}   -- ids, in the order expired
local traces = {}    -- the trace context of each, in the same order
local results = {}   -- i -> {result JSON, ttl} of each entry expired here
local leaving = arrival_tally()  -- the jobs expired here
local decided = {}   -- id -> 'expired' or 'kept': an id the list holds twice (reused)
local droppable = 0  -- the run of expired and stale entries at the window's tail
local in_run = true
local stopped = 0
for i = n, 1, -1 do
    local id = ids[i]
    local drop = false
    if decided[id] then
        -- Its job was decided at its tail-ward entry: expired there leaves this one stale.
        drop = decided[id] == 'expired'
    elseif id == WAKE_MARKER then
        -- A high or low enqueue's wake marker (include/wake_marker): never stale, it
        -- waits for the idle worker it wakes (the claim drops it).
        decided[id] = 'kept'
    elseif packed[i] then
        local job = parse(packed[i])
        if job and job.exp <= now then
            decided[id] = 'expired'
            drop = true
            expired[#expired + 1] = id
            traces[#traces + 1] = job.trace
            results[i] = {'{"status":"expired","result":null,"error":"not started within its'
                .. ' ttl of ' .. job.ttl .. ' s"}', job.ttl}
            arrival_leaves(leaving, job.enq, arrival_ms)
        elseif job and job.ordered then
            stopped = 1
            break
        else
            decided[id] = 'kept'
        end
    elseif redis.call('ZSCORE', KEYS[3], id) or redis.call('EXISTS', KEYS[5 + 2 * i]) == 1 then
        decided[id] = 'kept'
    else
        drop = true  -- stale: its job ended, or was expired, since it was pushed
    end
    in_run = in_run and drop
    if in_run then
        droppable = droppable + 1
    end
end
refusal = arrivals_refusal(leaving, 6)
if refusal then
    return refusal
end

-- The writes: nothing below can fail.
if #expired > 0 then
    redis.call('HINCRBY', KEYS[4], 'expired', #expired)
    redis.call('HDEL', KEYS[2], unpack(expired))
    for i = n, 1, -1 do
        if results[i] then
            redis.call('SET', KEYS[6 + 2 * i], results[i][1], 'EX', results[i][2])
            redis.call('PUBLISH', ARGV[1], ids[i])
        end
    end
end
arrivals_leave(leaving, 6, 5)
-- Only at the list's very tail: an entry skipped over stays where it is (taking it out
-- would cost O(list)); its run is trimmed once the entries tail-ward of it are gone.
-- One LREM per entry, tail first, each finding its entry at the tail: LTRIM would do it
-- in one call, but the worker's ACL role may not trim or pop the queue list (acl.py).
local trimmed = 0
if offset == 0 then
    for i = n, n - droppable + 1, -1 do
        trimmed = trimmed + redis.call('LREM', KEYS[1], -1, ids[i])
    end
end
return {expired, trimmed, stopped, traces}
