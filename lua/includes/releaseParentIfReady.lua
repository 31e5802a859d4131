--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/addDelayMarkerIfNeeded"
--- @include "includes/addJobWithPriority"
--- @include "includes/isQueuePausedOrMaxed"
-- A parent waits in its queue's waiting-children ZSET until its dependencies set is
-- empty. When that happens, move it to where a worker will find it: delayed (its
-- "delay" field > 0, due at timestamp + delay, scored due * 4096 with no sequence
-- number, as BullMQ does here), prioritized, or the front of wait,
-- with the matching event in the parent queue's stream. Does nothing while children
-- are pending, or when the parent is gone or not in waiting-children.
-- parentQueueKey is "<prefix>:<queue>" (no trailing colon).
local function releaseParentIfReady(parentQueueKey, parentKey, parentId, timestamp)
  if redis.call("SCARD", parentKey .. ":dependencies") > 0 then
    return
  end
  if redis.call("EXISTS", parentKey) ~= 1 then
    return
  end
  local base = parentQueueKey .. ":"
  if redis.call("ZREM", base .. "waiting-children", parentId) == 0 then
    return
  end
  local attrs = redis.call("HMGET", parentKey, "priority", "delay")
  local priority = tonumber(attrs[1]) or 0
  local delay = tonumber(attrs[2]) or 0
  local eventsKey = base .. "events"
  if delay > 0 then
    local delayedKey = base .. "delayed"
    local due = tonumber(timestamp) + delay
    redis.call("ZADD", delayedKey, due * 0x1000, parentId)
    redis.call("XADD", eventsKey, "*", "event", "delayed", "jobId", parentId, "delay", due)
    addDelayMarkerIfNeeded(base .. "marker", delayedKey)
    return
  end
  local held = isQueuePausedOrMaxed(base .. "meta", base .. "active")
  if priority > 0 then
    addJobWithPriority(base .. "prioritized", priority, parentId, base .. "pc")
  else
    redis.call("RPUSH", base .. "wait", parentId)
  end
  addBaseMarkerIfNeeded(base .. "marker", held)
  redis.call("XADD", eventsKey, "*", "event", "waiting", "jobId", parentId,
             "prev", "waiting-children")
end
