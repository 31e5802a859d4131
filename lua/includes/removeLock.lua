-- The lock check shared by the scripts that take a job out of active.
-- token "0" skips the check. Returns 0 when the caller may go on (the lock was ours
-- and is deleted, the id leaves the stalled set), -6 when another token holds the
-- lock, -2 when there is no lock.
local function removeLock(jobKey, stalledKey, token, jobId)
  if token == "0" then
    return 0
  end
  local lockKey = jobKey .. ":lock"
  local holder = redis.call("GET", lockKey)
  if holder == token then
    redis.call("DEL", lockKey)
    redis.call("SREM", stalledKey, jobId)
    return 0
  end
  if holder then
    return -6
  end
  return -2
end
