--- @include "includes/releaseParentIfReady"
-- An add named a custom id whose hash already exists (docs/protocol.md, "Adding jobs").
-- Nothing about the existing job changes, except that it may be attached to the new
-- parent: when it has no parent, the same parent, or a parent that is gone. A job that
-- already completed counts as processed for that parent (its returnvalue goes into
-- <parent>:processed and the parent may be released, unless the flow insert defers
-- that); otherwise it becomes one of the parent's pending dependencies.
-- Returns -7 when the job belongs to another parent that still exists, else the id
-- (after a "duplicated" event).
local function handleExistingCustomId(jobKey, jobId, parentKey, parent, parentJson,
                                      parentDepsKey, completedKey, eventsKey, maxEvents,
                                      timestamp, deferRelease)
  local ownParent = redis.call("HGET", jobKey, "parentKey")
  local ownParentLives = ownParent and ownParent ~= parentKey
                         and redis.call("EXISTS", ownParent) == 1
  if ownParentLives then
    if parentKey ~= nil then
      if deferRelease then
        redis.call("HSET", parentKey, "flowAttachmentFailed", "1")
      end
      return -7
    end
  elseif parentKey ~= nil then
    if redis.call("ZSCORE", completedKey, jobId) then
      local value = redis.call("HGET", jobKey, "returnvalue") or "null"
      redis.call("HSET", parentKey .. ":processed", jobKey, value)
      if not deferRelease then
        moveParentToWaitIfNoPending(parent["queueKey"], parentKey, parent["id"], timestamp)
      end
    elseif parentDepsKey ~= nil then
      redis.call("SADD", parentDepsKey, jobKey)
    end
    redis.call("HMSET", jobKey, "parentKey", parentKey, "parent", parentJson)
  end
  redis.call("XADD", eventsKey, "MAXLEN", "~", maxEvents, "*", "event", "duplicated",
             "jobId", jobId)
  return jobId
end
