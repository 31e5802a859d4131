-- Wake one blocked worker (member "0", score 0) unless the queue is paused or maxed.
local function addBaseMarkerIfNeeded(markerKey, pausedOrMaxed)
  if not pausedOrMaxed then
    redis.call("ZADD", markerKey, "0", "0")
  end
end
