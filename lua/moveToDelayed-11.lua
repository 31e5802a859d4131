--[[
  moveToDelayed-11: park an active job in delayed (retry with backoff, or a processor
  that raised DelayedError after choosing a time itself).

  KEYS  1 marker, 2 active, 3 prioritized, 4 delayed, 5 job key, 6 events, 7 meta,
        8 stalled, 9 wait, 10 limiter, 11 pc
  ARGV  1 key prefix, 2 now (ms), 3 jobId, 4 token, 5 delay (ms), 6 skip attempt "1"/"0",
        7 msgpack flat array of job fields to set (may be empty), 8 fetch next "1"/"0",
        9 msgpack {token, lockDuration, limiter?, name?} when fetching

  The job is scored for now + delay, its "delay" field set, attempts made + 1 unless the
  attempt is skipped, event "delayed" with the absolute due time.
  Returns the next job's {hash, id, 0, 0} when fetch next found one; otherwise the delay
  marker is updated and 0 returned. Errors: -1 missing, -6/-2 lock, -3 not in active.
]]
--- @include "includes/addDelayMarkerIfNeeded"
--- @include "includes/fetchNextJob"
--- @include "includes/getDelayedScore"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/incrementJobCounter"
--- @include "includes/leaveActive"

local markerKey = KEYS[1]
local activeKey = KEYS[2]
local delayedKey = KEYS[4]
local jobKey = KEYS[5]
local eventsKey = KEYS[6]
local metaKey = KEYS[7]
local jobId = ARGV[3]

local leaveResult = leaveActive(jobKey, activeKey, KEYS[8], ARGV[4], jobId, ARGV[7])
if leaveResult < 0 then
  return leaveResult
end

local score, due = getDelayedScore(delayedKey, ARGV[2], tonumber(ARGV[5]))
if ARGV[6] == "0" then
  incrementJobCounter(jobKey, "atm")
end
redis.call("HSET", jobKey, "delay", ARGV[5])
redis.call("ZADD", delayedKey, score, jobId)
redis.call("XADD", eventsKey, "MAXLEN", "~", getOrSetMaxEvents(metaKey), "*",
           "event", "delayed", "jobId", jobId, "delay", due)

if ARGV[8] == "1" then
  local fetched = fetchNextJob(KEYS[9], activeKey, KEYS[3], eventsKey, KEYS[10], delayedKey,
                               metaKey, KEYS[11], markerKey, ARGV[1], ARGV[2],
                               cmsgpack.unpack(ARGV[9]))
  -- only a real job is worth returning; otherwise the worker learns from the marker
  if fetched and type(fetched[1]) == "table" then
    return fetched
  end
end

addDelayMarkerIfNeeded(markerKey, delayedKey)
return 0
