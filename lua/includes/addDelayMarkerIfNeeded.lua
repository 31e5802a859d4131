--- @include "includes/getNextDelayedTimestamp"
-- Point the delay marker (member "1") at the earliest delayed job's due time, so a
-- blocked worker learns when to wake up.
local function addDelayMarkerIfNeeded(markerKey, delayedKey)
  local nextTimestamp = getNextDelayedTimestamp(delayedKey)
  if nextTimestamp ~= nil then
    redis.call("ZADD", markerKey, nextTimestamp, "1")
  end
end
