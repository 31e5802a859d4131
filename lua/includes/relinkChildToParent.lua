-- A finished child is about to run again (retried or reprocessed): make it one of
-- its parent's pending children once more, taking back the result the parent had
-- recorded for it (":processed" for a completed child, ":failed" or ":unsuccessful"
-- for a failed one). A parent that already left waiting-children is not moved back.
local function relinkChildToParent(jobKey, prevState, knownParentKey)
  -- knownParentKey: the job's parentKey field when the caller read it already (false when
  -- the field is missing); nil reads it here
  local parentKey = knownParentKey
  if parentKey == nil then
    parentKey = redis.call("HGET", jobKey, "parentKey")
  end
  if not parentKey or parentKey == "" or redis.call("EXISTS", parentKey) == 0 then
    return
  end
  local recorded
  if prevState == "failed" then
    recorded = redis.call("ZREM", parentKey .. ":unsuccessful", jobKey) == 1
      or redis.call("HDEL", parentKey .. ":failed", jobKey) == 1
  else
    recorded = redis.call("HDEL", parentKey .. ":processed", jobKey) == 1
  end
  if recorded then
    redis.call("SADD", parentKey .. ":dependencies", jobKey)
  end
end
