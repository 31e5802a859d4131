--[[
  changePriority-7: give a job a new priority; a job that is ready to run (in wait or
  prioritized) is re-queued under it, a job anywhere else only gets the field.

  KEYS[1]  wait
  KEYS[2]  paused (legacy, unused)
  KEYS[3]  meta
  KEYS[4]  prioritized
  KEYS[5]  active
  KEYS[6]  pc
  KEYS[7]  marker

  ARGV[1]  new priority (0 = none)
  ARGV[2]  key prefix
  ARGV[3]  job id
  ARGV[4]  "1" for lifo: front of wait (priority 0) or front of its priority band

  Returns 0, or -1 when the job hash does not exist.
]]
--- @include "includes/addJobWithPriority"
--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/isQueuePausedOrMaxed"

local priority = tonumber(ARGV[1]) or 0
local jobId = ARGV[3]
local jobKey = ARGV[2] .. jobId
local lifo = ARGV[4] == "1"
local waitKey, prioritizedKey = KEYS[1], KEYS[4]

if redis.call("EXISTS", jobKey) == 0 then
  return -1
end

local wasReady = redis.call("ZREM", prioritizedKey, jobId) > 0
if not wasReady then
  wasReady = redis.call("LREM", waitKey, -1, jobId) > 0
end

if wasReady then
  if priority == 0 then
    redis.call(lifo and "RPUSH" or "LPUSH", waitKey, jobId)
  elseif lifo then
    -- Counter 0: ahead of every job already waiting with the same priority.
    redis.call("ZADD", prioritizedKey, priority * 0x100000000, jobId)
  else
    addJobWithPriority(prioritizedKey, priority, jobId, KEYS[6])
  end
  addBaseMarkerIfNeeded(KEYS[7], isQueuePausedOrMaxed(KEYS[3], KEYS[5]))
end

redis.call("HSET", jobKey, "priority", priority)
return 0
