--- @include "includes/releaseParentIfReady"
-- Parent bookkeeping when a child finishes (moveToFinished). A parent lives in
-- another queue or the same one; parentQueueKey is "<prefix>:<queue>" (no colon at the
-- end), parentKey the parent's hash key, parentId its id.

-- A child completed: record its return value in the parent's processed hash (only if it
-- was still a pending dependency) and release the parent when it was the last one.
local function parentOnChildCompleted(parentQueueKey, parentKey, parentId, childKey,
                                      returnValue, now)
  if redis.call("SREM", parentKey .. ":dependencies", childKey) == 1 then
    redis.call("HSET", parentKey .. ":processed", childKey, returnValue)
    moveParentToWaitIfNoPending(parentQueueKey, parentKey, parentId, now)
  end
end

-- A child failed for good. What happens to the parent is chosen by flags in the child's
-- "parent" JSON (not by the options):
--   fpof  the parent records the child as unsuccessful and is sent to wait with a
--         deferred failure ("defa"), so a worker fails it
--   cpof  the parent records the failure and runs now, pending children or not
--   idof  the parent records the failure and runs once nothing else is pending
--   rdof  the child is simply dropped from the parent's dependencies
--   none  the parent keeps waiting
local function parentOnChildFailed(parentJson, childKey, failedReason, now)
  -- a foreign producer's "parent" may be anything: only {queueKey, id} is followed
  local ok, parent = pcall(cjson.decode, parentJson)
  if not ok or type(parent) ~= "table" or type(parent["queueKey"]) ~= "string"
      or (type(parent["id"]) ~= "string" and type(parent["id"]) ~= "number") then
    return
  end
  local parentQueueKey = parent["queueKey"]
  local parentId = parent["id"]
  local parentKey = parentQueueKey .. ":" .. parentId
  local pendingKey = parentKey .. ":dependencies"
  if parent["fpof"] then
    if redis.call("SREM", pendingKey, childKey) == 1 then
      redis.call("ZADD", parentKey .. ":unsuccessful", now, childKey)
      if redis.call("EXISTS", parentKey) == 1 then
        local reason = "child " .. childKey .. " failed"
        local heldIn
        if redis.call("ZSCORE", parentQueueKey .. ":waiting-children", parentId) then
          heldIn = parentQueueKey .. ":waiting-children"
        elseif redis.call("ZSCORE", parentQueueKey .. ":delayed", parentId) then
          heldIn = parentQueueKey .. ":delayed"
          redis.call("HSET", parentKey, "delay", 0)
        end
        if heldIn then
          redis.call("ZREM", heldIn, parentId)
          redis.call("HSET", parentKey, "defa", reason)
          moveParentToWait(parentQueueKey, parentKey, parentId, now)
        elseif not redis.call("ZSCORE", parentQueueKey .. ":failed", parentId) then
          -- running or queued already: it fails when a worker next finishes or takes it
          redis.call("HSET", parentKey, "defa", reason)
        end
      end
    end
  elseif parent["cpof"] then
    if redis.call("SREM", pendingKey, childKey) == 1 then
      redis.call("HSET", parentKey .. ":failed", childKey, failedReason)
      moveParentToWaitIfWaiting(parentQueueKey, parentKey, parentId, now)
    end
  elseif parent["idof"] or parent["rdof"] then
    if redis.call("SREM", pendingKey, childKey) == 1 then
      moveParentToWaitIfNoPending(parentQueueKey, parentKey, parentId, now)
      if parent["idof"] then
        redis.call("HSET", parentKey .. ":failed", childKey, failedReason)
      end
    end
  end
end

-- A finished job is being deleted (keepJobs): drop it from its parent's pending
-- children, and when it was the last one, send the parent to the front of wait.
-- parentKey may be nil: then it is read from the job hash and must still exist.
local function detachFromParent(jobKey, parentKey)
  if not parentKey then
    parentKey = redis.call("HGET", jobKey, "parentKey")
    if not parentKey or parentKey == "" or redis.call("EXISTS", parentKey) == 0 then
      return false
    end
  end
  local pendingKey = parentKey .. ":dependencies"
  if redis.call("SREM", pendingKey, jobKey) == 0 then
    return false
  end
  if redis.call("SCARD", pendingKey) == 0 then
    local parentId = string.match(parentKey, ".*:(.*)")
    local base = string.sub(parentKey, 1, #parentKey - #parentId)
    if redis.call("ZREM", base .. "waiting-children", parentId) == 1 then
      redis.call("RPUSH", base .. "wait", parentId)
      addBaseMarkerIfNeeded(base .. "marker", isQueuePausedOrMaxed(base .. "meta", base .. "active"))
      redis.call("XADD", base .. "events", "*", "event", "waiting", "jobId", parentId,
                 "prev", "waiting-children")
    end
  end
  return true
end
