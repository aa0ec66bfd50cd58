-- keys.py WAKE_MARKER: what a high or low enqueue pushes on an empty queue list to wake an
-- idle worker (include/levels.lua); never a job id (those start with a letter or digit).
local WAKE_MARKER = '^wake'
