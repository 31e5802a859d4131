--[[
  removeJobScheduler-3: delete a job scheduler and its upcoming run, if that still waits
  in delayed.

  KEYS[1]  repeat    KEYS[2]  delayed    KEYS[3]  events
  ARGV[1]  scheduler id
  ARGV[2]  key prefix ("bull:q:")

  Returns 0 when the scheduler existed and is gone, 1 when there was no such scheduler.
  The deleted run writes "removed" (prev "delayed"). A run already waiting or active is
  left to finish; it creates no further run, since its scheduler is gone.
]]
--- @include "includes/removeJobKeys"

local schedulerId = ARGV[1]
local millis = redis.call("ZSCORE", KEYS[1], schedulerId)
if millis then
  local runId = "repeat:" .. schedulerId .. ":" .. millis
  if redis.call("ZREM", KEYS[2], runId) == 1 then
    removeJobKeys(ARGV[2] .. runId)
    redis.call("XADD", KEYS[3], "*", "event", "removed", "jobId", runId, "prev", "delayed")
  end
end
if redis.call("ZREM", KEYS[1], schedulerId) == 1 then
  redis.call("DEL", KEYS[1] .. ":" .. schedulerId)
  return 0
end
return 1
