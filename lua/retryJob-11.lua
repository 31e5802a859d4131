--[[
  retryJob-11: an attempt failed and the job should run again at once (no backoff).

  KEYS  1 active, 2 wait, 3 paused (unused), 4 job key, 5 meta, 6 events, 7 delayed,
        8 prioritized, 9 pc, 10 marker, 11 stalled
  ARGV  1 key prefix, 2 now (ms), 3 "LPUSH" (back of the line) or "RPUSH" (lifo: next),
        4 jobId, 5 token, 6 optional msgpack flat array of job fields to set

  Due delayed jobs are promoted first, so a retried job does not overtake them.
  The job returns to wait (or prioritized with a fresh counter), attempts made + 1,
  event "waiting" (prev "active").
  Returns 0, or -1 job missing, -6/-2 lock, -3 not in active.
]]
--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/addJobWithPriority"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/incrementJobCounter"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/promoteDelayedJobs"
--- @include "includes/leaveActive"

local activeKey = KEYS[1]
local jobKey = KEYS[4]
local metaKey = KEYS[5]
local markerKey = KEYS[10]
local jobId = ARGV[4]

promoteDelayedJobs(KEYS[7], markerKey, KEYS[2], KEYS[8], KEYS[6], ARGV[1], ARGV[2], KEYS[9],
                   isQueuePausedOrMaxed(metaKey, activeKey))

local leaveResult = leaveActive(jobKey, activeKey, KEYS[11], ARGV[5], jobId, ARGV[6])
if leaveResult < 0 then
  return leaveResult
end

-- the job just left active, which may have freed the global concurrency
local pausedOrMaxed = isQueuePausedOrMaxed(metaKey, activeKey)
local prio = tonumber(redis.call("HGET", jobKey, "priority")) or 0
if prio > 0 then
  addJobWithPriority(KEYS[8], prio, jobId, KEYS[9])
else
  local pushCmd = ARGV[3] == "RPUSH" and "RPUSH" or "LPUSH"
  redis.call(pushCmd, KEYS[2], jobId)
end
addBaseMarkerIfNeeded(markerKey, pausedOrMaxed)

incrementJobCounter(jobKey, "atm")
redis.call("XADD", KEYS[6], "MAXLEN", "~", getOrSetMaxEvents(metaKey), "*",
           "event", "waiting", "jobId", jobId, "prev", "active")
return 0
