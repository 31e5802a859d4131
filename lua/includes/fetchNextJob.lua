--- @include "includes/getQueueMetadata"
--- @include "includes/getNextDelayedTimestamp"
--- @include "includes/getRateLimitTTL"
--- @include "includes/claimJobHash"
--- @include "includes/moveJobFromPrioritizedToActive"
--- @include "includes/prepareJobForProcessing"
--- @include "includes/promoteDelayedJobs"
-- The fetch step shared by moveToActive, moveToFinished and moveToDelayed.
-- opts is the worker's unpacked map {token, lockDuration, limiter = {max, duration}?, name?};
-- metaFields, when the caller already read them, meta's paused, concurrency, max, duration.
-- Order: promote due delayed jobs; rate limit (meta "max" wins over limiter.max, the
-- worker's limiter.duration wins over meta "duration"); paused or maxed; then the right
-- end of wait (skipping legacy "0:..." markers and ids whose key is not a hash), then the
-- best prioritized job. Nothing found there: the base marker is removed (it is stale).
-- Returns
--   {flat job hash, jobId, 0, 0}  a job was moved to active
--   {0, 0, ttl, 0}               rate limited for ttl more ms
--   {0, 0, 0, 0}                 paused or maxed
--   {0, 0, 0, nextDue}           nothing ready; the earliest delayed job is due at nextDue
--   nil                          nothing ready and nothing delayed
local function fetchNextJob(waitKey, activeKey, prioritizedKey, eventsKey, limiterKey,
                            delayedKey, metaKey, pcKey, markerKey, keyPrefix, now, opts,
                            metaFields)
  local pausedOrMaxed, globalMax, globalWindow = getQueueMetadata(metaKey, activeKey, metaFields)

  promoteDelayedJobs(delayedKey, markerKey, waitKey, prioritizedKey, eventsKey, keyPrefix,
                     now, pcKey, pausedOrMaxed)

  local workerLimiter = opts["limiter"]
  local maxJobs = tonumber(globalMax or (workerLimiter and workerLimiter["max"]))
  local ttl = getRateLimitTTL(maxJobs, limiterKey)
  if ttl > 0 then
    return {0, 0, ttl, 0}
  end

  if pausedOrMaxed then
    return {0, 0, 0, 0}
  end

  local windowMs = (workerLimiter and workerLimiter["duration"]) or globalWindow

  local jobId = redis.call("RPOPLPUSH", waitKey, activeKey)
  local fields
  -- entries starting with "0:" are markers written by BullMQ before v6, and ids whose key
  -- is not a job hash (a foreign producer's; claimJobHash refuses them): drop them
  while jobId do
    if string.sub(jobId, 1, 2) ~= "0:" then
      fields = claimJobHash(keyPrefix .. jobId)
      if fields then
        break
      end
      redis.log(redis.LOG_WARNING, "queue " .. keyPrefix .. ": job id " .. jobId ..
                " dropped from wait: its key is not a job hash")
    end
    redis.call("LREM", activeKey, 1, jobId)
    jobId = redis.call("RPOPLPUSH", waitKey, activeKey)
  end
  if not jobId then
    jobId = moveJobFromPrioritizedToActive(prioritizedKey, activeKey, pcKey)
    while jobId do
      fields = claimJobHash(keyPrefix .. jobId)
      if fields then
        break
      end
      redis.call("LREM", activeKey, 1, jobId)
      redis.log(redis.LOG_WARNING, "queue " .. keyPrefix .. ": job id " .. jobId ..
                " dropped from prioritized: its key is not a job hash")
      jobId = moveJobFromPrioritizedToActive(prioritizedKey, activeKey, pcKey)
    end
  end
  if jobId then
    return prepareJobForProcessing(keyPrefix, limiterKey, eventsKey, jobId, fields, now, maxJobs,
                                   windowMs, markerKey, opts)
  end

  -- wait and prioritized are empty: a base marker left now is stale (the last pick-up wrote
  -- it for a next job that is not there) and would only wake the next idle worker for an
  -- empty fetch; the next job to arrive writes its own
  redis.call("ZREM", markerKey, "0")

  local nextDue = getNextDelayedTimestamp(delayedKey)
  if nextDue then
    return {0, 0, 0, nextDue}
  end
  return nil
end
