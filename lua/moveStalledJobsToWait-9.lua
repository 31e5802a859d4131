--[[
  moveStalledJobsToWait-9: the periodic stall check (mark and sweep).

  KEYS  1 stalled, 2 wait, 3 active, 4 stalled-check, 5 meta, 6 paused (unused),
        7 marker, 8 events, 9 repeat
  ARGV  1 maxStalledCount, 2 key prefix, 3 now (ms), 4 stalled interval (ms)

  Only one worker per interval does the work: the stalled-check key throttles it.
  Sweep: every id marked at the previous check that is still active and has no lock is
  stalled. Its stalled counter (stc) goes up; beyond maxStalledCount it gets a deferred
  failure ("defa"), unless it is the live job of a job scheduler. Either way it returns to
  the front of wait (event "waiting" prev "active", then "stalled"); a worker that takes a
  job carrying defa fails it without running it.
  Mark: everything now in active is recorded for the next check; lock renewals unmark.
  Returns the ids found stalled ({} when another worker checked within the interval).
]]
--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/incrementJobCounter"
--- @include "includes/isForeignKey"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/trimEvents"

local stalledKey = KEYS[1]
local waitKey = KEYS[2]
local activeKey = KEYS[3]
local metaKey = KEYS[5]
local markerKey = KEYS[7]
local eventsKey = KEYS[8]
local repeatKey = KEYS[9]
local maxStalled = tonumber(ARGV[1])
local keyPrefix = ARGV[2]

if redis.call("EXISTS", KEYS[4]) == 1 then
  return {}
end
redis.call("SET", KEYS[4], ARGV[3], "PX", ARGV[4])
trimEvents(metaKey, eventsKey)

-- true when the job was produced by a job scheduler that still exists
local function belongsToLiveScheduler(jobKey)
  local schedulerId = redis.call("HGET", jobKey, "rjk")
  if not schedulerId then
    return false
  end
  if redis.call("EXISTS", repeatKey .. ":" .. schedulerId) == 1 then
    return true
  end
  -- older schedulers only had their entry in the repeat ZSET
  return redis.call("ZSCORE", repeatKey, schedulerId) ~= false
end

local found = {}
local suspects = redis.call("SMEMBERS", stalledKey)
if #suspects > 0 then
  redis.call("DEL", stalledKey)
  for _, suspect in ipairs(suspects) do
    if string.sub(suspect, 1, 2) == "0:" or isForeignKey(keyPrefix .. suspect) then
      -- a legacy marker, or an id whose key is not a job hash, that reached active: drop it
      redis.call("LREM", activeKey, 1, suspect)
    else
      local jobKey = keyPrefix .. suspect
      if redis.call("EXISTS", jobKey .. ":lock") == 0
          and redis.call("LREM", activeKey, 1, suspect) > 0 then
        local stalls = incrementJobCounter(jobKey, "stc")
        if stalls > maxStalled and not belongsToLiveScheduler(jobKey) then
          redis.call("HSET", jobKey, "defa", "job stalled more than allowable limit")
        end
        redis.call("RPUSH", waitKey, suspect)
        addBaseMarkerIfNeeded(markerKey, isQueuePausedOrMaxed(metaKey, activeKey))
        redis.call("XADD", eventsKey, "*", "event", "waiting", "jobId", suspect, "prev", "active")
        redis.call("XADD", eventsKey, "*", "event", "stalled", "jobId", suspect)
        found[#found + 1] = suspect
      end
    end
  end
end

local stillActive = redis.call("LRANGE", activeKey, 0, -1)
for first = 1, #stillActive, 7000 do
  local last = math.min(first + 6999, #stillActive)
  redis.call("SADD", stalledKey, unpack(stillActive, first, last))
end
return found
