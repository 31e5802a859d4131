-- The events stream's approximate cap: meta "opts.maxLenEvents", written as 10000
-- when a queue's meta does not have it yet. A caller that read the field with other meta
-- fields passes what it read (read: false when absent) and saves the HGET.
local function getOrSetMaxEvents(metaKey, read)
  local maxEvents = read
  if maxEvents == nil then
    maxEvents = redis.call("HGET", metaKey, "opts.maxLenEvents")
  end
  if not maxEvents then
    maxEvents = "10000"
    redis.call("HSET", metaKey, "opts.maxLenEvents", maxEvents)
  end
  return maxEvents
end
