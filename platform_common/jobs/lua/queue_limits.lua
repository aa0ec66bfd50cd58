-- Change an agent type's limits (queue/limits.py checks every value first): the claim
-- reads them on every call that starts jobs (lua/include/limits.lua), so a change holds
-- from the next claim on, in every worker, without a restart.
-- KEYS[1] the type's limits hash
-- ARGV: field, value pairs; an empty value deletes the field (that limit is lifted).
-- Fair share's key weights are fields `weight:<key>` of the same hash; after the writes
-- the field `weights` counts them (absent at 0: the claim reads a key's weight only while
-- it is above 0).
-- Returns the hash as it is now (HGETALL); no field left deletes the key (no limits:
-- the claim reads one absent key).
-- A limits key of another type is refused with the error reply "CORRUPT 1 <problem>"
-- before anything is written.
-- @include key_types
local refusal = wrong_type(1, 'hash')
if refusal then
    return refusal
end
local set, lifted = {}, {}
for i = 1, #ARGV, 2 do
    if ARGV[i + 1] == '' then
        lifted[#lifted + 1] = ARGV[i]
    else
        set[#set + 1] = ARGV[i]
        set[#set + 1] = ARGV[i + 1]
    end
end
if #lifted > 0 then
    redis.call('HDEL', KEYS[1], unpack(lifted))
end
if #set > 0 then
    redis.call('HSET', KEYS[1], unpack(set))
end
local weights = 0
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(field, 1, 7) == 'weight:' then
        weights = weights + 1
    end
end
if weights > 0 then
    redis.call('HSET', KEYS[1], 'weights', weights)
else
    redis.call('HDEL', KEYS[1], 'weights')
end
return redis.call('HGETALL', KEYS[1])
