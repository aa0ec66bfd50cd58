-- Fair share's lists (keys.py: the ring, a list; each key's list `<ring>:q:<key>`): what
-- every script that puts a job on a key's list needs, and nothing of the claim's (each
-- script's ACL rules are derived from the commands its source names, includes too).
local FAIR_SHARED = ''  -- keys.py FAIR_SHARED_ENTRY: no fairness key is empty

-- The refusal of a key a fair script derives (in no KEYS: "CORRUPT 0 <key> <problem>")
-- that holds another type than `kind`, else nil (a missing key is none).
local function fair_wrong_type(key, kind)
    local found = redis.call('TYPE', key).ok
    if found ~= kind and found ~= 'none' then
        return redis.error_reply('CORRUPT 0 ' .. key .. ' holds a ' .. found
            .. ', where the queue keeps a ' .. kind)
    end
    return nil
end

-- After `pushed` ids went onto key `key`'s list (LPUSH at the back, as an enqueue; RPUSH at
-- the consuming end, for a job that waited its turn already), `length` the push's reply:
-- the key joins the ring if its list was empty (and the ring, empty, gets the queue
-- list's turn first). The caller pushes (each script names only the commands it calls:
-- its ACL rules are derived from them, acl.py) after checking the list's type
-- (fair_wrong_type) and the ring's.
local function fair_joined(ring, key, length, pushed)
    if length == pushed then
        if redis.call('LLEN', ring) == 0 then
            redis.call('LPUSH', ring, FAIR_SHARED)
        end
        redis.call('LPUSH', ring, key)
    end
end

-- Back on the queue (queue_fail, queue_promote, queue_dead_requeue): the key list a job
-- of job-hash `fair_key` (a string, or nil/false: none) goes back to, when the caller
-- passed the ring `ring`; nil for the queue list (no ring, no key). The empty key is
-- FAIR_SHARED's, never a fairness key's: none. A job of priority high or low goes to its
-- level's list whatever its key: the caller asks only for a normal one.
local function fair_home(ring, fair_key)
    if ring and type(fair_key) == 'string' and fair_key ~= FAIR_SHARED then
        return ring .. ':q:' .. fair_key
    end
    return nil
end
