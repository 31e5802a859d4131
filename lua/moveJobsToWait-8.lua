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
-- Three commands a job (HMGET, HDEL, XADD); the ZREM from the state set and the LPUSH into wait go in bulk
-- after the loop (LPUSH a b c pushes a, then b, then c: the order of one LPUSH each).
local toWait = {}
for _, jobId in ipairs(ids) do
  local jobKey = prefix .. jobId
  local fields = redis.call("HMGET", jobKey, "priority", "parentKey")
  if resultField then
    redis.call("HDEL", jobKey, "finishedOn", "processedOn", resultField)
    relinkChildToParent(jobKey, prevState, fields[2])
  elseif redis.call("EXISTS", jobKey) == 1 then
    redis.call("HSET", jobKey, "delay", 0)
  end
  local priority = tonumber(fields[1]) or 0
  if priority > 0 then
    addJobWithPriority(prioritizedKey, priority, jobId, pcKey)
  else
    toWait[#toWait + 1] = jobId
  end
  redis.call("XADD", KEYS[2], "*", "event", "waiting", "jobId", jobId, "prev", prevState)
end
-- one trim for the batch instead of one per XADD: the same cap, checked once
redis.call("XTRIM", KEYS[2], "MAXLEN", "~", cap)
-- in slices: Lua's unpack stops near 8000 values
for from = 1, #ids, 5000 do
  redis.call("ZREM", stateKey, unpack(ids, from, math.min(from + 4999, #ids)))
end
for from = 1, #toWait, 5000 do
  redis.call("LPUSH", KEYS[4], unpack(toWait, from, math.min(from + 4999, #toWait)))
end
addBaseMarkerIfNeeded(KEYS[8], isQueuePausedOrMaxed(KEYS[6], KEYS[7]))

if #ids >= batchSize then
  return 1
end
return 0
