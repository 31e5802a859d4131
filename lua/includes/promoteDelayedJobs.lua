--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/addJobWithPriority"
-- Move delayed jobs whose due time has come (score <= (now+1)*4096-1, so everything due
-- up to and including this millisecond) to wait, or to prioritized when the job hash has
-- a priority. At most 1000 per call; the rest follow on the next call.
-- Each promoted job gets a "waiting" event (prev "delayed") and its "delay" field reset
-- to 0. Called at the start of every fetch and of retryJob; pausedOrMaxed decides
-- whether a base marker wakes a worker afterwards.
local function promoteDelayedJobs(delayedKey, markerKey, waitKey, prioritizedKey,
                                  eventsKey, keyPrefix, now, pcKey, pausedOrMaxed)
  -- numbers go to redis.call as text made here: Redis 6.2 would format each with "%.17g"
  local cutoff = string.format("%d", (tonumber(now) + 1) * 0x1000 - 1)
  local ready = redis.call("ZRANGEBYSCORE", delayedKey, "0", cutoff, "LIMIT", "0", "1000")
  if #ready == 0 then
    return
  end
  redis.call("ZREM", delayedKey, unpack(ready))
  for _, readyId in ipairs(ready) do
    local readyKey = keyPrefix .. readyId
    local prio = tonumber(redis.call("HGET", readyKey, "priority")) or 0
    if prio > 0 then
      addJobWithPriority(prioritizedKey, prio, readyId, pcKey)
    else
      -- lifo does not apply to promoted jobs: they queue at the back like new ones
      redis.call("LPUSH", waitKey, readyId)
    end
    redis.call("XADD", eventsKey, "*", "event", "waiting", "jobId", readyId, "prev", "delayed")
    redis.call("HSET", readyKey, "delay", 0)
  end
  addBaseMarkerIfNeeded(markerKey, pausedOrMaxed)
end
