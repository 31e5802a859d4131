--- @include "includes/splitJobKey"
--- @include "includes/unlinkFromParent"
--- @include "includes/takeJobOutOfState"
--- @include "includes/dropOwnedDedupKey"
--- @include "includes/removeJobKeys"
--- @include "includes/getOrSetMaxEvents"

-- Remove one job for good, depth first through its children when asked:
-- every child it knows of (processed, failed, unsuccessful and pending ones, in any
-- queue) goes first, then the job leaves its state set or list, frees its
-- deduplication id, loses its hash and sub-keys, and its queue gets the event
-- "removed" with prev = the state it left.
--
-- parentBeingRemoved is the full key of the parent when this call comes from that
-- parent's own removal: the child then only leaves the parent's pending set, and
-- the parent is not released (it is about to be deleted). Otherwise the job is
-- unlinked from its parent, which may release the parent. Locks are not checked
-- here (see isJobLocked).
local removeJobTree

local function removeChildrenOf(jobKey)
  local childKeys = redis.call("HKEYS", jobKey .. ":processed")
  local more = redis.call("HKEYS", jobKey .. ":failed")
  for _, k in ipairs(more) do childKeys[#childKeys + 1] = k end
  more = redis.call("ZRANGE", jobKey .. ":unsuccessful", 0, -1)
  for _, k in ipairs(more) do childKeys[#childKeys + 1] = k end
  more = redis.call("SMEMBERS", jobKey .. ":dependencies")
  for _, k in ipairs(more) do childKeys[#childKeys + 1] = k end
  for _, childKey in ipairs(childKeys) do
    local childId, childPrefix = splitJobKey(childKey)
    removeJobTree(childPrefix, childId, jobKey, true)
  end
end

removeJobTree = function(prefix, jobId, parentBeingRemoved, withChildren)
  local jobKey = prefix .. jobId
  if parentBeingRemoved then
    redis.call("SREM", parentBeingRemoved .. ":dependencies", jobKey)
  else
    unlinkFromParent(jobKey, prefix, false)
  end
  if withChildren then
    removeChildrenOf(jobKey)
  end
  local prev = takeJobOutOfState(prefix, jobId)
  dropOwnedDedupKey(prefix, jobId, redis.call("HGET", jobKey, "deid"))
  if removeJobKeys(jobKey) > 0 then
    local cap = getOrSetMaxEvents(prefix .. "meta")
    redis.call("XADD", prefix .. "events", "MAXLEN", "~", cap, "*", "event", "removed",
      "jobId", jobId, "prev", prev)
  end
end
