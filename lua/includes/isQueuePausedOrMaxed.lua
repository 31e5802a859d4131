-- True when no worker should take a job now: meta has a "paused" field (any value),
-- or meta "concurrency" is set and the active list already holds that many jobs.
local function isQueuePausedOrMaxed(metaKey, activeKey)
  local fields = redis.call("HMGET", metaKey, "paused", "concurrency")
  if fields[1] then
    return true
  end
  if fields[2] then
    return redis.call("LLEN", activeKey) >= tonumber(fields[2])
  end
  return false
end
