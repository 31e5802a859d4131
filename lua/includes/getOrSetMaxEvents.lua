-- The events stream's approximate cap: meta "opts.maxLenEvents", written as 10000
-- when a queue's meta does not have it yet.
local function getOrSetMaxEvents(metaKey)
  local maxEvents = redis.call("HGET", metaKey, "opts.maxLenEvents")
  if not maxEvents then
    maxEvents = 10000
    redis.call("HSET", metaKey, "opts.maxLenEvents", maxEvents)
  end
  return maxEvents
end
