-- Priority levels (queue/priority.py): a job of level high or low waits on a list of its
-- own, a normal one on the queue list. Its level is "h" or "l" in its packed header, and
-- "high" or "low" in the `priority` field of its job hash (absent: normal).
-- The list a job of job-hash priority `priority` waits on: `high` or `low` (keys, nil when
-- the caller passed none: then every job goes to `normal`), else `normal`.
local function level_list(priority, normal, high, low)
    if priority == 'high' and high then
        return high
    elseif priority == 'low' and low then
        return low
    end
    return normal
end

-- @include wake_marker

-- Wake an idle worker for `n` jobs just pushed on a level list: an idle worker blocks on
-- the queue list (BLMOVE), so while that list is empty a wake marker (keys.py
-- WAKE_MARKER) goes on it. The claim drops a marker and takes by priority, and a take
-- that leaves high or low jobs waiting calls this again: the worker it wakes takes and
-- wakes the next, so one marker wakes as many idle workers as there are jobs for, and
-- no more than one ever waits. While the list is not empty no worker blocks on it, and
-- none is pushed.
local function wake_idle(queue, n)
    if n > 0 and redis.call('LLEN', queue) == 0 then
        redis.call('LPUSH', queue, WAKE_MARKER)
    end
end
