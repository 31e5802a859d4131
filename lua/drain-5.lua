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
  ARGV[3]  optional: how many jobs to delete from each key in this call, give or take
           one per spared job (absent or 0: all of them, in one call, as Node's drain does)

  The upcoming job of each scheduler ("repeat:<id>:<next millis>") is spared
  wherever it is, so draining never ends a schedule. Returns 0 when no job of those
  keys is left (bar the spared ones), 1 when a call with a count stopped at it in some
  key: call again. A drain of a million jobs in one call blocks Redis for seconds;
  Queue.drain calls this with a count until it returns 0.
]]
--- @include "includes/purgeJobs"

local baseKey = ARGV[1]
local count = tonumber(ARGV[3] or "0") or 0

local spare = {}
local spared = 0
local schedulers = redis.call("ZRANGE", KEYS[5], 0, -1, "WITHSCORES")
for i = 1, #schedulers, 2 do
  spare["repeat:" .. schedulers[i] .. ":" .. schedulers[i + 1]] = true
  spared = spared + 1
end

-- With a count, each key is looked at `count` entries deep plus one per spared job, so
-- spared jobs at the head can never fill the window: a call that deletes fewer than
-- `count` from every key has emptied them all.
local window = count > 0 and count + spared or 0
local more = 0
local function purged(n)
  if count > 0 and n >= count then more = 1 end
end

purged(purgeListJobs(KEYS[1], baseKey, window, spare))
purged(purgeListJobs(KEYS[2], baseKey, window, spare))
if ARGV[2] == "1" then
  purged(purgeZSetJobs(KEYS[3], baseKey, window, spare))
end
purged(purgeZSetJobs(KEYS[4], baseKey, window, spare))
return more
