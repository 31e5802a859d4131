--- @include "includes/collectMetrics"
--- @include "includes/counterAfterOne"
--- @include "includes/fetchNextJob"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/incrementJobCounter"
--- @include "includes/finishDeduplication"
--- @include "includes/moveParentToWait"
--- @include "includes/removeFinishedJobs"
--- @include "includes/removeJobKeys"
--- @include "includes/removeLock"
--- @include "includes/updateJobFields"
-- The whole of moveToFinished-14 for one job (see that script for the checks, the writes
-- and the answers), shared with moveToFinishedMany-11, which finishes several jobs of one
-- queue in one call, and with cancelJob-9, which fails a job that never ran (it puts the
-- job in active first; prevState names the state it left, "active" when nil, for the
-- event's "prev"). Returns what moveToFinished-14 returns.
local function finishActiveJob(waitKey, activeKey, prioritizedKey, eventsKey, stalledKey,
                               limiterKey, delayedKey, metaKey, pcKey, finishedKey, jobKey,
                               metricsKey, markerKey, jobId, now, resultField, resultValue,
                               target, fetchNext, keyPrefix, packedOpts, packedFields, prevState)
  prevState = prevState or "active"
  if redis.call("EXISTS", jobKey) == 0 then
    return -1
  end
  if target == "completed" then
    if redis.call("SCARD", jobKey .. ":dependencies") > 0 then
      return -4
    end
    if redis.call("ZCARD", jobKey .. ":unsuccessful") > 0 then
      return -9
    end
  end

  local opts = cmsgpack.unpack(packedOpts)
  local lockResult = removeLock(jobKey, stalledKey, opts["token"], jobId)
  if lockResult < 0 then
    return lockResult
  end
  updateJobFields(jobKey, packedFields)

  local attrs = redis.call("HMGET", jobKey, "parentKey", "parent", "deid", "atm", "cancelled")
  local parentKey = attrs[1]
  local parentJson = attrs[2]
  local dedupId = attrs[3]

  if redis.call("LREM", activeKey, "-1", jobId) < 1 then
    return -3
  end

  -- the events cap and what the fetch below needs of meta, in one read; the stream is
  -- trimmed by the XADD of this job's event (the oldest entries go, never the new ones;
  -- a cap of 0 empties it before that XADD)
  local meta = redis.call("HMGET", metaKey, "paused", "concurrency", "max", "duration", "opts.maxLenEvents")
  local maxEvents = getOrSetMaxEvents(metaKey, meta[5])

  if dedupId then
    releaseDeduplicationKey(keyPrefix, dedupId, jobId)
    createPendingDeduplicatedJob(keyPrefix, dedupId, eventsKey, metaKey, activeKey, waitKey,
                                 markerKey, prioritizedKey, pcKey, delayedKey, now)
  end

  -- tell the parent: from the "parent" JSON when present, else from parentKey
  if parentJson or (parentKey and parentKey ~= "") then
    if target == "completed" then
      local parentQueueKey, parentId
      if parentJson then
        -- a foreign producer's "parent" may be anything: only a JSON object is read
        local ok, parent = pcall(cjson.decode, parentJson)
        if ok and type(parent) == "table" then
          parentQueueKey = parent["queueKey"]
          parentId = parent["id"]
        end
      end
      if (not parentId or parentId == "") and parentKey then
        parentId = string.match(parentKey, ".*:(.*)")
        if parentId then
          parentQueueKey = string.sub(parentKey, 1, #parentKey - #parentId - 1)
        end
      end
      if parentKey and parentId and parentQueueKey then
        parentOnChildCompleted(parentQueueKey, parentKey, parentId, jobKey, resultValue, now)
      end
    elseif parentJson then
      parentOnChildFailed(parentJson, jobKey, resultValue, now)
    end
  end

  -- attempts made + 1: written with the result below (or by HINCRBY when the stored value
  -- is not a plain integer)
  local attemptsMade, attemptsText = counterAfterOne(attrs[4])
  if not attemptsMade then
    attemptsMade = incrementJobCounter(jobKey, "atm")
    attemptsText = string.format("%d", attemptsMade)
  end

  local keepJobs = opts["keepJobs"] or {}
  local keepCount = tonumber(keepJobs["count"])
  if keepCount == 0 then
    removeJobKeys(jobKey)
    if parentKey and parentKey ~= "" then
      detachFromParent(jobKey, parentKey)
    end
  else
    redis.call("ZADD", finishedKey, now, jobId)
    redis.call("HSET", jobKey, resultField, resultValue, "finishedOn", now, "atm", attemptsText)
    if target == "failed" then
      redis.call("HDEL", jobKey, "defa", "cancelled")
    elseif attrs[5] then
      -- finished before its cancellation reached it: the mark (and the deferred failure
      -- cancelJob-9 wrote with it) has served, so a reprocess runs the job again
      redis.call("HDEL", jobKey, "defa", "cancelled")
    end
    local maxAge = tonumber(keepJobs["age"])
    if maxAge then
      removeJobsByMaxAge(now, maxAge, finishedKey, keyPrefix, tonumber(keepJobs["limit"]) or 1000)
    end
    if keepCount and keepCount > 0 then
      removeJobsByMaxCount(keepCount, finishedKey, keyPrefix)
    end
  end

  if (tonumber(maxEvents) or 1) > 0 then
    redis.call("XADD", eventsKey, "MAXLEN", "~", maxEvents, "*", "event", target, "jobId", jobId,
               resultField, resultValue, "prev", prevState)
  else
    -- a cap of 0 ("streams.events.maxLen: 0"): "MAXLEN ~ 0" on the XADD would remove the
    -- new entry with the old ones, so the stream is emptied first and keeps only the
    -- events of this call, as Node's trim-then-write does
    redis.call("XTRIM", eventsKey, "MAXLEN", 0)
    redis.call("XADD", eventsKey, "*", "event", target, "jobId", jobId,
               resultField, resultValue, "prev", prevState)
  end
  if target == "failed" and attemptsMade >= (tonumber(opts["attempts"]) or 0) then
    redis.call("XADD", eventsKey, "*", "event", "retries-exhausted", "jobId", jobId,
               "attemptsMade", attemptsText)
  end

  local maxMetrics = opts["maxMetricsSize"]
  if maxMetrics and maxMetrics ~= "" then
    collectMetrics(metricsKey, metricsKey .. ":data", maxMetrics, now)
  end

  if fetchNext == "1" then
    local fetched = fetchNextJob(waitKey, activeKey, prioritizedKey, eventsKey, limiterKey,
                                 delayedKey, metaKey, pcKey, markerKey, keyPrefix, now, opts,
                                 meta)
    if fetched then
      return fetched
    end
  end

  if redis.call("LLEN", waitKey) == 0 and redis.call("LLEN", activeKey) == 0
      and redis.call("ZCARD", prioritizedKey) == 0 then
    redis.call("XADD", eventsKey, "*", "event", "drained")
  end
  return 0
end
