-- Paused-or-maxed, plus the global rate limit from meta ("max", "duration"), in one HMGET,
-- or from fields the caller already read with others (paused, concurrency, max, duration
-- first, in that order).
-- Returns pausedOrMaxed (bool), max (string or false), duration (string or false).
local function getQueueMetadata(metaKey, activeKey, fields)
  fields = fields or redis.call("HMGET", metaKey, "paused", "concurrency", "max", "duration")
  local pausedOrMaxed = false
  if fields[1] then
    pausedOrMaxed = true
  elseif fields[2] then
    pausedOrMaxed = redis.call("LLEN", activeKey) >= tonumber(fields[2])
  end
  return pausedOrMaxed, fields[3], fields[4]
end
