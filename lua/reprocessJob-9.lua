--[[
  reprocessJob-9: run a completed or failed job again (Node's job.retry()).

  KEYS[1]  job hash
  KEYS[2]  events
  KEYS[3]  the set the job should be in (completed or failed)
  KEYS[4]  wait
  KEYS[5]  meta
  KEYS[6]  active
  KEYS[7]  marker
  KEYS[8]  prioritized
  KEYS[9]  pc

  ARGV[1]  job id
  ARGV[2]  "LPUSH" (back of wait) or "RPUSH" (lifo: next to run)
  ARGV[3]  the result field to clear: "returnvalue" or "failedReason"
  ARGV[4]  the state it leaves: "completed" or "failed" (the event's prev)
  ARGV[5]  "1" to reset attempts made (atm)
  ARGV[6]  "1" to reset attempts started (ats)

  The job loses finishedOn, processedOn and its result, goes to wait (or prioritized
  with a fresh counter), becomes a pending child of its parent again, and "waiting"
  is written. Returns 1, -1 when the job hash does not exist, -3 when it is not in
  KEYS[3].
]]
--- @include "includes/addJobWithPriority"
--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/relinkChildToParent"

local jobKey = KEYS[1]
local jobId = ARGV[1]

if redis.call("EXISTS", jobKey) == 0 then
  return -1
end
if redis.call("ZREM", KEYS[3], jobId) == 0 then
  return -3
end

local cleared = {"finishedOn", "processedOn", ARGV[3]}
if ARGV[5] == "1" then cleared[#cleared + 1] = "atm" end
if ARGV[6] == "1" then cleared[#cleared + 1] = "ats" end
redis.call("HDEL", jobKey, unpack(cleared))

local pausedOrMaxed = isQueuePausedOrMaxed(KEYS[5], KEYS[6])
local priority = tonumber(redis.call("HGET", jobKey, "priority")) or 0
if priority > 0 then
  addJobWithPriority(KEYS[8], priority, jobId, KEYS[9])
else
  redis.call(ARGV[2] == "RPUSH" and "RPUSH" or "LPUSH", KEYS[4], jobId)
end
addBaseMarkerIfNeeded(KEYS[7], pausedOrMaxed)

relinkChildToParent(jobKey, ARGV[4])

local cap = getOrSetMaxEvents(KEYS[5])
redis.call("XADD", KEYS[2], "MAXLEN", "~", cap, "*", "event", "waiting",
  "jobId", jobId, "prev", ARGV[4])
return 1
