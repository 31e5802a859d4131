--- @include "includes/splitJobKey"
-- True when a worker holds the job's lock or, with withChildren, the lock of any
-- of its pending children (followed through <job>:dependencies, across queues).
local function isJobLocked(prefix, jobId, withChildren)
  local jobKey = prefix .. jobId
  if redis.call("EXISTS", jobKey .. ":lock") == 1 then
    return true
  end
  if withChildren then
    local children = redis.call("SMEMBERS", jobKey .. ":dependencies")
    for _, childKey in ipairs(children) do
      local childId, childPrefix = splitJobKey(childKey)
      if isJobLocked(childPrefix, childId, true) then
        return true
      end
    end
  end
  return false
end
