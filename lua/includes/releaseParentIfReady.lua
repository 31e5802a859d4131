--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/addDelayMarkerIfNeeded"
--- @include "includes/addJobWithPriority"
--- @include "includes/isQueuePausedOrMaxed"
-- Releasing a parent job from waiting-children once no child is pending. Used when a
-- child finishes (moveToFinished, through moveParentToWait) and when a custom-id add
-- finds the child already completed (handleExistingCustomId). parentQueueKey is
-- "<prefix>:<queue>" (no colon at the end), parentKey the parent's hash key, parentId
-- its id.

-- Make a parent runnable: delayed when its "delay" field is > 0 (due now + delay),
-- else prioritized or the front of wait; event "delayed" or "waiting" (prev
-- "waiting-children") in the parent queue's stream. The caller has already taken the
-- parent out of the set it waited in.
local function moveParentToWait(parentQueueKey, parentKey, parentId, now)
  local base = parentQueueKey .. ":"
  local attrs = redis.call("HMGET", parentKey, "priority", "delay")
  local prio = tonumber(attrs[1]) or 0
  local delay = tonumber(attrs[2]) or 0
  if delay > 0 then
    local due = tonumber(now) + delay
    redis.call("ZADD", base .. "delayed", due * 0x1000, parentId)
    redis.call("XADD", base .. "events", "*", "event", "delayed", "jobId", parentId, "delay", due)
    addDelayMarkerIfNeeded(base .. "marker", base .. "delayed")
    return
  end
  local held = isQueuePausedOrMaxed(base .. "meta", base .. "active")
  if prio > 0 then
    addJobWithPriority(base .. "prioritized", prio, parentId, base .. "pc")
  else
    redis.call("RPUSH", base .. "wait", parentId)
  end
  addBaseMarkerIfNeeded(base .. "marker", held)
  redis.call("XADD", base .. "events", "*", "event", "waiting", "jobId", parentId,
             "prev", "waiting-children")
end

-- Release the parent if it still exists and is in waiting-children.
local function moveParentToWaitIfWaiting(parentQueueKey, parentKey, parentId, now)
  if redis.call("EXISTS", parentKey) == 1
      and redis.call("ZREM", parentQueueKey .. ":waiting-children", parentId) == 1 then
    moveParentToWait(parentQueueKey, parentKey, parentId, now)
  end
end

-- Release the parent once no child is pending any more.
local function moveParentToWaitIfNoPending(parentQueueKey, parentKey, parentId, now)
  if redis.call("SCARD", parentKey .. ":dependencies") == 0 then
    moveParentToWaitIfWaiting(parentQueueKey, parentKey, parentId, now)
  end
end
