--[[
  promote-9: make a delayed job ready to run now.

  KEYS[1]  delayed
  KEYS[2]  wait
  KEYS[3]  paused (legacy, unused)
  KEYS[4]  meta
  KEYS[5]  prioritized
  KEYS[6]  active
  KEYS[7]  pc
  KEYS[8]  events
  KEYS[9]  marker

  ARGV[1]  key prefix ("bull:q:")
  ARGV[2]  job id

  Returns 0 when the job moved to wait (priority 0) or prioritized, -3 when the id
  is not in the delayed set. Writes the event "waiting" with prev "delayed".
]]
--- @include "includes/addJobWithPriority"
--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/isQueuePausedOrMaxed"

local jobId = ARGV[2]
local waitKey = KEYS[2]

if redis.call("ZREM", KEYS[1], jobId) == 0 then
  return -3
end

local jobKey = ARGV[1] .. jobId
local priority = tonumber(redis.call("HGET", jobKey, "priority")) or 0
local pausedOrMaxed = isQueuePausedOrMaxed(KEYS[4], KEYS[6])

-- A v4/v5 producer may have left a "0:<ts>" delay marker at the head of wait;
-- a real job is about to be there, so the marker has no purpose left.
local head = redis.call("LINDEX", waitKey, 0)
if head and string.sub(head, 1, 2) == "0:" then
  redis.call("LPOP", waitKey)
end

if priority > 0 then
  addJobWithPriority(KEYS[5], priority, jobId, KEYS[7])
else
  redis.call("LPUSH", waitKey, jobId)
end
addBaseMarkerIfNeeded(KEYS[9], pausedOrMaxed)

redis.call("XADD", KEYS[8], "*", "event", "waiting", "jobId", jobId, "prev", "delayed")
if redis.call("EXISTS", jobKey) == 1 then
  redis.call("HSET", jobKey, "delay", 0)
end
return 0
