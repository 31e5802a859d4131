--[[
  moveJobsToWait-8: move a batch of failed, completed or delayed jobs to wait
  (Node's queue.retryJobs() and queue.promoteJobs()).

  KEYS[1]  key prefix ("bull:q:")
  KEYS[2]  events
  KEYS[3]  the state set: failed, completed or delayed
  KEYS[4]  wait
  KEYS[5]  paused (legacy, unused)
  KEYS[6]  meta
  KEYS[7]  active
  KEYS[8]  marker

  ARGV[1]  batch size
  ARGV[2]  only jobs scored up to this value: a finish time in ms for failed and
           completed; promoteJobs sends the largest number there is
  ARGV[3]  the state name ("failed", "completed", "delayed"), the events' prev

  Finished jobs lose finishedOn, processedOn and their result and become pending
  children of their parent again; promoted delayed jobs get delay 0. Jobs with a
  priority go to prioritized (fresh counter), the others to the back of wait. One
  "waiting" event per job, the base marker unless paused or maxed.
  Returns 1 when the batch was full (call again), 0 when done.
]]
--- @include "includes/addJobWithPriority"
--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/relinkChildToParent"

local prefix = KEYS[1]
local stateKey = KEYS[3]
local batchSize = tonumber(ARGV[1]) or 1000
local prevState = ARGV[3]

local ids = redis.call("ZRANGEBYSCORE", stateKey, 0, ARGV[2], "LIMIT", 0, batchSize)
if #ids == 0 then
  return 0
end

local resultField
if prevState == "failed" then
  resultField = "failedReason"
elseif prevState == "completed" then
  resultField = "returnvalue"
end

local cap = getOrSetMaxEvents(KEYS[6])
local prioritizedKey = prefix .. "prioritized"
local pcKey = prefix .. "pc"
for _, jobId in ipairs(ids) do
  local jobKey = prefix .. jobId
  redis.call("ZREM", stateKey, jobId)
  if resultField then
    redis.call("HDEL", jobKey, "finishedOn", "processedOn", resultField)
    relinkChildToParent(jobKey, prevState)
  elseif redis.call("EXISTS", jobKey) == 1 then
    redis.call("HSET", jobKey, "delay", 0)
  end
  local priority = tonumber(redis.call("HGET", jobKey, "priority")) or 0
  if priority > 0 then
    addJobWithPriority(prioritizedKey, priority, jobId, pcKey)
  else
    redis.call("LPUSH", KEYS[4], jobId)
  end
  redis.call("XADD", KEYS[2], "MAXLEN", "~", cap, "*", "event", "waiting",
    "jobId", jobId, "prev", prevState)
end
addBaseMarkerIfNeeded(KEYS[8], isQueuePausedOrMaxed(KEYS[6], KEYS[7]))

if #ids >= batchSize then
  return 1
end
return 0
