--[[
  pause-7: pause or resume a queue for every worker at once.

  KEYS[1]  wait      when pausing; the legacy paused list when resuming
  KEYS[2]  paused    when pausing; wait when resuming (the caller swaps the two)
  KEYS[3]  meta
  KEYS[4]  prioritized
  KEYS[5]  events
  KEYS[6]  delayed
  KEYS[7]  marker

  ARGV[1]  "paused" or "resumed"
  ARGV[2]  "0" to write no event, anything else to write one

  Pausing only raises the meta "paused" flag and drops the marker: jobs stay where
  they are and workers stop fetching because every fetch checks the flag.
  Resuming clears the flag, folds a list left behind by an older (v5) pause into
  wait, and writes a marker so blocked workers wake up.

  Returns the number of jobs still left in the legacy paused list (0 almost always;
  the caller repeats the resume, without the event, until it is 0).
]]
--- @include "includes/addDelayMarkerIfNeeded"

local metaKey = KEYS[3]
local markerKey = KEYS[7]
local leftOver = 0

if ARGV[1] == "paused" then
  redis.call("HSET", metaKey, "paused", 1)
  redis.call("DEL", markerKey)
else
  redis.call("HDEL", metaKey, "paused")

  local legacyKey, waitKey = KEYS[1], KEYS[2]
  if redis.call("EXISTS", legacyKey) == 1 then
    if redis.call("EXISTS", waitKey) == 0 then
      redis.call("RENAME", legacyKey, waitKey)
    else
      -- Both lists share the orientation (newest left, next to run right). Appending
      -- the legacy list to the right end of wait, left slice first, keeps its order
      -- and puts its jobs (the older ones) ahead of those already in wait. A bounded
      -- slice keeps one call short and within Lua's argument limits.
      local slice = redis.call("LRANGE", legacyKey, 0, 6999)
      redis.call("RPUSH", waitKey, unpack(slice))
      redis.call("LTRIM", legacyKey, #slice, -1)
      leftOver = redis.call("LLEN", legacyKey)
    end
  end

  local ready = redis.call("LLEN", waitKey) + redis.call("ZCARD", KEYS[4])
  if ready > 0 then
    redis.call("ZADD", markerKey, 0, "0")
  else
    addDelayMarkerIfNeeded(markerKey, KEYS[6])
  end
end

if ARGV[2] ~= "0" then
  redis.call("XADD", KEYS[5], "*", "event", ARGV[1])
end

return leftOver
