--[[
  removeUnprocessedChildren-2: remove every child of a job that has not been
  processed yet (Node's job.removeUnprocessedChildren()), and their own unprocessed
  children, depth first, across queues.

  KEYS: 1 job hash, 2 meta (unused; kept for BullMQ's key count)
  ARGV: 1 key prefix, 2 job id

  A child is unprocessed while it is one of the job's pending children
  (<job>:dependencies). A pending child that a worker holds (it has a lock) or that
  sits in its queue's failed set is left alone, with its subtree. Each removed child
  leaves the pending set, its state list or set, frees its deduplication id, loses
  its hash and sub-keys, and its queue gets "removed" (prev = the state it left).
  When the job's last pending child goes and the job is in waiting-children, the job
  is released as after a removal (see unlinkFromParent). A removed child's own
  children do not release it (it is being removed). Returns nothing.
]]
--- @include "includes/splitJobKey"
--- @include "includes/unlinkFromParent"
--- @include "includes/takeJobOutOfState"
--- @include "includes/dropOwnedDedupKey"
--- @include "includes/removeJobKeys"
--- @include "includes/getOrSetMaxEvents"

local removePending

-- Remove one pending child of parentKey (and its pending subtree). release: whether
-- parentKey may be released when this was its last pending child.
local function removeChild(childKey, parentKey, release)
  local childId, childPrefix = splitJobKey(childKey)
  if redis.call("EXISTS", childKey .. ":lock") == 1
      or redis.call("ZSCORE", childPrefix .. "failed", childId) then
    return
  end
  if release then
    unlinkFromParent(childKey, childPrefix, false, parentKey)
  else
    redis.call("SREM", parentKey .. ":dependencies", childKey)
  end
  removePending(childKey, false)
  local prev = takeJobOutOfState(childPrefix, childId)
  dropOwnedDedupKey(childPrefix, childId, redis.call("HGET", childKey, "deid"))
  if removeJobKeys(childKey) > 0 then
    local cap = getOrSetMaxEvents(childPrefix .. "meta")
    redis.call("XADD", childPrefix .. "events", "MAXLEN", "~", cap, "*", "event", "removed",
      "jobId", childId, "prev", prev)
  end
end

removePending = function(parentKey, release)
  local children = redis.call("SMEMBERS", parentKey .. ":dependencies")
  for _, childKey in ipairs(children) do
    removeChild(childKey, parentKey, release)
  end
end

if redis.call("EXISTS", KEYS[1]) == 1 then
  removePending(KEYS[1], true)
end
