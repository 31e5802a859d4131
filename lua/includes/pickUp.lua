--- @include "includes/fetchNextJob"
-- What moveToActive and moveToActiveMany do around fetchNextJob.

-- The time of a pick-up in ms: ARGV's "now", or when that is empty (a pick-up written behind
-- the worker's BZPOPMIN, which Redis runs only when the wait ends) the server's clock.
local function pickUpTime(now)
  if now == "" then
    local t = redis.call("TIME")
    return string.format("%d", tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  end
  return now
end

-- After a pick-up that took a job (fetched, its answer): how many jobs wait and prioritized
-- still hold goes in as its fifth element. When none, the base marker is removed (it would
-- wake a worker only for an empty fetch) and the fourth element says when the earliest
-- delayed job is due (0: none). Returns that count.
local function noteReady(fetched, waitKey, prioritizedKey, markerKey, delayedKey)
  local ready = redis.call("LLEN", waitKey) + redis.call("ZCARD", prioritizedKey)
  fetched[5] = ready
  if ready == 0 then
    redis.call("ZREM", markerKey, "0")
    fetched[4] = getNextDelayedTimestamp(delayedKey) or 0
  end
  return ready
end
