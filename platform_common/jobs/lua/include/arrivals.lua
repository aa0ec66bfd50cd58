-- @include counts
-- A packed job leaving the queued hash leaves its arrival second too (queue/envelope.py:
-- the arrived hash counts each second's packed jobs, the arrivals zset orders the
-- seconds): a script tallies the jobs leaving per second, checks those counts before its
-- first write and takes them off with its writes.

-- An empty tally: `seconds` in the order met, `jobs[second]` how many of its jobs leave.
local function arrival_tally()
    return {seconds = {}, jobs = {}}
end

-- One job of enqueued_at `enq` (its stored digits; nil when they do not read) leaves.
local function arrival_leaves(tally, enq, arrival_ms)
    if enq and #enq <= 15 then
        local second = tonumber(enq) - tonumber(enq) % arrival_ms
        if not tally.jobs[second] then
            tally.jobs[second] = 0
            tally.seconds[#tally.seconds + 1] = second
        end
        tally.jobs[second] = tally.jobs[second] + 1
    end
end

-- The refusal of a count of the arrived hash KEYS[arrived] the tally takes from, or nil.
local function arrivals_refusal(tally, arrived)
    if #tally.seconds == 0 then
        return nil
    end
    return counts_refusal(arrived, tally.seconds)
end

-- The writes: each second's count goes down by its jobs leaving; a second left with none
-- leaves the arrived hash and the arrivals zset.
local function arrivals_leave(tally, arrived, arrivals)
    for _, second in ipairs(tally.seconds) do
        if redis.call('HINCRBY', KEYS[arrived], second, -tally.jobs[second]) <= 0 then
            redis.call('HDEL', KEYS[arrived], second)
            redis.call('ZREM', KEYS[arrivals], second)
        end
    end
end
