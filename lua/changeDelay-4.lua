--[[
  changeDelay-4: give a delayed job a new due time, counted from now.

  KEYS[1]  delayed
  KEYS[2]  meta
  KEYS[3]  marker
  KEYS[4]  events

  ARGV[1]  the new delay in ms (0 or less: due now)
  ARGV[2]  now in ms (Node sends the JSON text of a number)
  ARGV[3]  job id
  ARGV[4]  job hash key

  Returns 0, -1 when the job hash does not exist, -3 when the job is not delayed.
  Writes "delayed" (delay = the new absolute due time) and moves the delay marker.
]]
--- @include "includes/getDelayedScore"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/addDelayMarkerIfNeeded"

local delayedKey = KEYS[1]
local jobId = ARGV[3]
local jobKey = ARGV[4]
local delay = tonumber(ARGV[1]) or 0

if redis.call("EXISTS", jobKey) == 0 then
  return -1
end
if redis.call("ZREM", delayedKey, jobId) == 0 then
  return -3
end

local score, due = getDelayedScore(delayedKey, ARGV[2], delay)
redis.call("ZADD", delayedKey, score, jobId)
redis.call("HSET", jobKey, "delay", delay)

local cap = getOrSetMaxEvents(KEYS[2])
redis.call("XADD", KEYS[4], "MAXLEN", "~", cap, "*", "event", "delayed",
  "jobId", jobId, "delay", due)
addDelayMarkerIfNeeded(KEYS[3], delayedKey)
return 0
