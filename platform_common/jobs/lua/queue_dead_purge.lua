-- Delete kept jobs for good: the list entry, the record and the result.
-- KEYS[1] dead (or failed) list; KEYS[2i] job hash of job i, KEYS[2i+1] result key of job i
-- ARGV[i] job id of job i
-- Returns the number of jobs purged (ids not in the list are ignored).
-- The first command is an LREM of the list: a list key of another type fails it before
-- anything is written; DEL takes a record or result of any type.
local purged = 0
for i = 1, #ARGV do
    if redis.call('LREM', KEYS[1], 1, ARGV[i]) == 1 then
        redis.call('DEL', KEYS[2 * i], KEYS[2 * i + 1])
        purged = purged + 1
    end
end
return purged
