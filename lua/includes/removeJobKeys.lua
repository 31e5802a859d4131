-- Delete a job hash together with every key hanging off it (logs, flow bookkeeping).
-- The lock key is left alone: callers that may meet a live lock decide about it.
-- Returns how many of these keys existed.
local function removeJobKeys(jobKey)
  return redis.call("DEL", jobKey, jobKey .. ":logs", jobKey .. ":dependencies",
    jobKey .. ":processed", jobKey .. ":failed", jobKey .. ":unsuccessful")
end
