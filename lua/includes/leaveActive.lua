--- @include "includes/removeLock"
--- @include "includes/updateJobFields"
-- The common start of the scripts that move an active job somewhere else (moveToDelayed,
-- retryJob): the job must exist (-1), its lock must be the caller's (-6 another owner,
-- -2 no lock; token "0" skips the check), the fields to update are written, and the id
-- must leave active (-3). Returns 0 when the caller may go on.
local function leaveActive(jobKey, activeKey, stalledKey, token, jobId, packedFields)
  if redis.call("EXISTS", jobKey) == 0 then
    return -1
  end
  local lockResult = removeLock(jobKey, stalledKey, token, jobId)
  if lockResult < 0 then
    return lockResult
  end
  updateJobFields(jobKey, packedFields)
  if redis.call("LREM", activeKey, -1, jobId) < 1 then
    return -3
  end
  return 0
end
