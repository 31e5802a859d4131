-- Put a job into the prioritized ZSET: priority * 2^32 plus the queue's priority
-- counter, so lower numbers run first and equal priorities run in arrival order.
local function addJobWithPriority(prioritizedKey, priority, jobId, pcKey)
  local counter = redis.call("INCR", pcKey)
  local score = tonumber(priority) * 0x100000000 + counter % 0x100000000
  redis.call("ZADD", prioritizedKey, score, jobId)
end
