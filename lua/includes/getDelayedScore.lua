-- Score for a job due at timestamp + delay in the delayed ZSET: due * 4096 plus a
-- sequence number that keeps FIFO order among jobs due in the same millisecond
-- (one more than the highest score already in that millisecond's bucket, capped).
-- Returns score, due.
local function getDelayedScore(delayedKey, timestamp, delay)
  local due = tonumber(timestamp)
  local d = tonumber(delay)
  if d and d > 0 then
    due = due + d
  end
  local low = due * 0x1000
  local high = low + 0xfff
  local top = redis.call("ZREVRANGEBYSCORE", delayedKey, high, low, "WITHSCORES", "LIMIT", 0, 1)
  if #top > 0 then
    local score = tonumber(top[2]) + 1
    if score > high then
      score = high
    end
    return score, due
  end
  return low, due
end
