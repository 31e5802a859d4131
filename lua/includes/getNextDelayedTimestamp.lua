-- Due time (ms, possibly fractional) of the earliest delayed job, or nil when none.
-- Delayed scores are due * 4096 + sequence.
local function getNextDelayedTimestamp(delayedKey)
  local first = redis.call("ZRANGE", delayedKey, 0, 0, "WITHSCORES")
  if #first > 0 then
    return tonumber(first[2]) / 0x1000
  end
end
