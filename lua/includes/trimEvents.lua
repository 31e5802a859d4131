--- @include "includes/getOrSetMaxEvents"
-- Approximate trim of the events stream to the queue's cap.
local function trimEvents(metaKey, eventsKey)
  local maxEvents = getOrSetMaxEvents(metaKey)
  redis.call("XTRIM", eventsKey, "MAXLEN", "~", maxEvents)
end
