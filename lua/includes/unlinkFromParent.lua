--- @include "includes/splitJobKey"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/addJobWithPriority"
--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/removeJobKeys"
--- @include "includes/dropOwnedDedupKey"

-- A parent whose last pending child went away (removed, drained) may run now:
-- prioritized if it has a priority, else the front of wait; the marker wakes a
-- worker unless its queue is paused or maxed. With emitEvent, event "waiting", prev
-- "waiting-children", in the parent's own queue (a bulk purge writes no events, as
-- Node's drain and obliterate write none).
local function releaseParentAfterRemoval(parentKey, parentId, parentPrefix, emitEvent)
  local priority = tonumber(redis.call("HGET", parentKey, "priority")) or 0
  local pausedOrMaxed = isQueuePausedOrMaxed(parentPrefix .. "meta", parentPrefix .. "active")
  if priority > 0 then
    addJobWithPriority(parentPrefix .. "prioritized", priority, parentId, parentPrefix .. "pc")
  else
    redis.call("RPUSH", parentPrefix .. "wait", parentId)
  end
  addBaseMarkerIfNeeded(parentPrefix .. "marker", pausedOrMaxed)
  if not emitEvent then
    return
  end
  local cap = getOrSetMaxEvents(parentPrefix .. "meta")
  redis.call("XADD", parentPrefix .. "events", "MAXLEN", "~", cap, "*", "event", "waiting",
    "jobId", parentId, "prev", "waiting-children")
end

-- Take a job that is going away out of its parent's pending children (the job's
-- "parentKey" field names the parent). If it was the last one and the parent is
-- waiting for children, the parent is released, except that with purgeSameQueue
-- (drain, obliterate) a parent in queue baseKey is deleted as well, since it would
-- be removed by the same sweep, and a parent in another queue is released without
-- an event. Returns true when the parent listed the job.
-- givenParentKey (optional) names the parent instead of the job's "parentKey" field;
-- the caller has checked that it exists.
local function unlinkFromParent(jobKey, baseKey, purgeSameQueue, givenParentKey)
  local parentKey = givenParentKey
  if not parentKey then
    parentKey = redis.call("HGET", jobKey, "parentKey")
    if not parentKey or parentKey == "" or redis.call("EXISTS", parentKey) == 0 then
      return false
    end
  end
  local depsKey = parentKey .. ":dependencies"
  if redis.call("SREM", depsKey, jobKey) == 0 then
    return false
  end
  if redis.call("SCARD", depsKey) > 0 then
    return true
  end
  local parentId, parentPrefix = splitJobKey(parentKey)
  if redis.call("ZREM", parentPrefix .. "waiting-children", parentId) == 0 then
    return true
  end
  if purgeSameQueue and parentPrefix == baseKey then
    unlinkFromParent(parentKey, baseKey, true)
    dropOwnedDedupKey(parentPrefix, parentId, redis.call("HGET", parentKey, "deid"))
    removeJobKeys(parentKey)
  else
    releaseParentAfterRemoval(parentKey, parentId, parentPrefix, not purgeSameQueue)
  end
  return true
end
