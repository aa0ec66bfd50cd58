-- @include counts
-- An agent type's limits (queue/limits.py, written by lua/queue_limits.lua), as the
-- claim applies them before it takes or starts a job. Fields of the limits hash:
--   rate, interval_ms  at most `rate` job starts per `interval_ms`, across every worker
--   burst              how many of those may start at once after a quiet spell (absent:
--                      `rate`)
--   max_running        at most this many of the type's jobs running at once: its leases,
--                      so a crashed worker's slots come back when the reaper takes its
--                      leases back
--   max_running_per_key  at most this many jobs of one fairness key running at once
--                      (include/fair_turns.lua; fair_by, kept in the same hash, is read by
--                      the enqueue)
-- The rate is a GCRA: the rate key holds the theoretical arrival time (TAT, ms by Redis'
-- clock, text) of the next start; a start moves it one step (interval_ms / rate) on, and
-- a start is allowed while the TAT is at most `burst` steps ahead of now. One key, one
-- GET and one SET per claim that starts jobs; it expires once the TAT has passed.

-- (`weights`: how many `weight:<key>` fields the hash holds, kept by lua/queue_limits.lua;
-- fair share reads a key's weight only while it is above 0)
local LIMIT_FIELDS = {'rate', 'interval_ms', 'burst', 'max_running', 'max_running_per_key',
    'weights'}
local LIMIT_MAX = 1000000000  -- queue/limits.py refuses more; a hand edit may not

-- The limits the claim applies, read from the hash KEYS[index]: nil when none is set
-- (then the claim costs one HMGET of an absent key more than without limits), a table
-- {rate, interval_ms, burst, max_running, max_running_per_key, weights} (each a number or
-- nil), or nil and the refusal "CORRUPT <index> ..." of a value that does not parse
-- (read before any write).
local function read_limits(index)
    local f = redis.pcall('HMGET', KEYS[index], unpack(LIMIT_FIELDS))
    if failed(f) then
        return nil, wrong_type(index, 'hash') or f
    end
    if not (f[1] or f[2] or f[3] or f[4] or f[5] or f[6]) then
        return nil
    end
    local limits = {}
    for i, field in ipairs(LIMIT_FIELDS) do
        local value = f[i]
        if value then
            local n = int(value)
            if not n or n < 1 or n > LIMIT_MAX then
                return nil, corrupt(index, 'field ' .. field
                    .. ' is not a whole number from 1 to ' .. LIMIT_MAX .. ': ' .. shown(value))
            end
            limits[field] = n
        end
    end
    if (limits.rate == nil) ~= (limits.interval_ms == nil) then
        return nil, corrupt(index, 'fields rate and interval_ms are set one without the other')
    end
    return limits
end

-- How many of `wanted` jobs may start now under `limits` (read_limits), `now` in ms:
-- returns allowed, held, spend, bound. allowed > 0: start at most that many, then call
-- spend_rate(spend, started, now, rate_index) after the writes. allowed == 0: none may
-- start, `held` is the claim's reply: {'capped'} (max_running are running) or
-- {'throttled', ms} (the next start is allowed in ms). `bound`: the stats counter of the
-- limit that held some back (held_back_max_running or held_back_rate), nil if none did.
-- Or nil and a refusal of the rate key KEYS[rate_index] (another type, a TAT that does
-- not parse). Reads only. leases_index: the type's leases zset (its type is checked by
-- the caller).
local function admitted(limits, wanted, now, leases_index, rate_index)
    local allowed, bound = wanted, nil
    if limits.max_running then
        local room = limits.max_running - redis.call('ZCARD', KEYS[leases_index])
        if room <= 0 then
            return 0, {'capped'}, nil, 'held_back_max_running'
        end
        if room < allowed then
            allowed, bound = room, 'held_back_max_running'
        end
    end
    if not limits.rate then
        return allowed, nil, nil, bound
    end
    local stored = redis.pcall('GET', KEYS[rate_index])
    if failed(stored) then
        return nil, wrong_type(rate_index, 'string') or stored
    end
    local step = limits.interval_ms / limits.rate
    local burst = limits.burst or limits.rate
    local tat = now
    if stored then
        local t = string.find(stored, '^%d+%.?%d*$') and #stored <= 24 and tonumber(stored)
        if not t then
            return nil, corrupt(rate_index, 'is not a time in ms: ' .. shown(stored))
        end
        -- A start never leaves the TAT more than `burst` steps ahead of now. One further
        -- ahead was left by a slower rate (changed since), or Redis' clock went back (a
        -- failover): it would hold the type back longer than the rate does, so it is
        -- taken as a full bucket less one start, and the next start rewrites it.
        if t > now + burst * step then
            tat = now + (burst - 1) * step
        else
            tat = math.max(t, now)
        end
    end
    local room = math.floor((now + burst * step - tat) / step + 1e-9)
    if room <= 0 then
        return 0, {'throttled', math.max(1, math.ceil(tat - now - (burst - 1) * step))}, nil,
            'held_back_rate'
    end
    if room < allowed then
        allowed, bound = room, 'held_back_rate'
    end
    return allowed, nil, {tat = tat, step = step}, bound
end

-- The refusal of a held-back counter of the stats hash KEYS[index] that HINCRBY would
-- refuse, else nil (read before any write).
local function held_back_counts(index)
    return counts_refusal(index,
        {'held_back_rate', 'held_back_max_running', 'held_back_max_running_per_key'})
end

-- After the claim's writes: `started` starts move the TAT on (nothing when no rate is
-- set or nothing started). The key lives until the TAT has passed.
local function spend_rate(spend, started, now, rate_index)
    if spend and started > 0 then
        local tat = spend.tat + started * spend.step
        redis.call('SET', KEYS[rate_index], string.format('%.3f', tat), 'PX',
            math.max(1, math.ceil(tat - now)))
    end
end
