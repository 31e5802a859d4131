--[[
  moveJobFromActiveToWait-9: give an active job back without counting an attempt
  (rate-limit errors, worker shutdown).

  KEYS  1 active, 2 wait, 3 stalled, 4 paused (unused), 5 meta, 6 limiter, 7 prioritized,
        8 marker, 9 events
  ARGV  1 jobId, 2 token, 3 job key

  The job goes to the front of its line: right end of wait (base marker unless paused or
  maxed), or for a job with a priority the head of that priority (counter 0). Event
  "waiting" (prev "active").
  Returns -1 job missing, -6/-2 lock owned by another token / no lock; otherwise the
  limiter's remaining PTTL in ms, or 0.
]]
--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/removeLock"

local jobId = ARGV[1]
local jobKey = ARGV[3]
if redis.call("EXISTS", jobKey) == 0 then
  return -1
end
local lockResult = removeLock(jobKey, KEYS[3], ARGV[2], jobId)
if lockResult < 0 then
  return lockResult
end

if redis.call("LREM", KEYS[1], 1, jobId) > 0 then
  local pausedOrMaxed = isQueuePausedOrMaxed(KEYS[5], KEYS[1])
  local prio = tonumber(redis.call("HGET", jobKey, "priority")) or 0
  if prio > 0 then
    redis.call("ZADD", KEYS[7], prio * 0x100000000, jobId)
  else
    redis.call("RPUSH", KEYS[2], jobId)
    addBaseMarkerIfNeeded(KEYS[8], pausedOrMaxed)
  end
  redis.call("XADD", KEYS[9], "MAXLEN", "~", getOrSetMaxEvents(KEYS[5]), "*",
             "event", "waiting", "jobId", jobId, "prev", "active")
end

local remaining = redis.call("PTTL", KEYS[6])
if remaining > 0 then
  return remaining
end
return 0
