--[[
  drain-5: delete every job that is waiting to run (wait, the legacy paused list,
  prioritized and, on request, delayed). Active, finished and waiting-children jobs
  stay. Nothing is written to the events stream.

  KEYS[1]  wait
  KEYS[2]  paused (legacy)
  KEYS[3]  delayed
  KEYS[4]  prioritized
  KEYS[5]  repeat (the job schedulers ZSET)

  ARGV[1]  key prefix ("bull:q:")
  ARGV[2]  "1" to drain delayed jobs as well

  The upcoming job of each scheduler ("repeat:<id>:<next millis>") is spared
  wherever it is, so draining never ends a schedule. Returns 0.
]]
--- @include "includes/purgeJobs"

local baseKey = ARGV[1]

local spare = {}
local schedulers = redis.call("ZRANGE", KEYS[5], 0, -1, "WITHSCORES")
for i = 1, #schedulers, 2 do
  spare["repeat:" .. schedulers[i] .. ":" .. schedulers[i + 1]] = true
end

purgeListJobs(KEYS[1], baseKey, 0, spare)
purgeListJobs(KEYS[2], baseKey, 0, spare)
if ARGV[2] == "1" then
  purgeZSetJobs(KEYS[3], baseKey, 0, spare)
end
purgeZSetJobs(KEYS[4], baseKey, 0, spare)
return 0
