-- What the scripts acting on a kept list (queue_dead_purge, queue_dead_requeue) share:
-- their first two arguments, ARGV[1] the state a record on the list holds ('dead' or
-- 'failed') and ARGV[2] the moment (Redis ms; '' for any time), and their verdict on a
-- record. A caller passes its job ids from ARGV[3].

-- The kept state and the moment (nil: any time), or nil, nil and the refusal to return.
local function kept_arguments()
    local kept_state, moment = ARGV[1], ARGV[2]
    if kept_state ~= 'dead' and kept_state ~= 'failed' then
        return nil, nil,
            redis.error_reply("ERR the kept state must be 'dead' or 'failed'; nothing was changed")
    end
    if moment ~= '' and not (#moment <= 15 and string.find(moment, '^%d+$')) then
        return nil, nil,
            redis.error_reply('ERR the moment must be whole ms or empty; nothing was changed')
    end
    return kept_state, tonumber(moment), nil
end

-- 'stale' (the record is in another state: not a kept job of this list), 'newer' (it
-- ended, finished_at as stored, after the moment: left alone) or nil (act on it). A
-- finished_at that is missing or does not parse counts as before the moment: every
-- ending writes it, so such a record is not a new one.
local function kept_verdict(state, ended, kept_state, moment)
    if state ~= kept_state then
        return 'stale'
    end
    if moment and ended and #ended <= 15 and string.find(ended, '^%d+$')
            and tonumber(ended) > moment then
        return 'newer'
    end
    return nil
end
