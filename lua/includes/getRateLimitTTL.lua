-- How long (ms) the rate limiter still holds workers back, or 0 when it does not.
-- maxJobs is the effective limit (meta "max" or the worker's limiter.max), nil when
-- neither is configured: then the limiter key is ignored, even one set by a manual
-- rateLimit(). A counter whose TTL reads 0 is dropped so the next window starts clean.
local function getRateLimitTTL(maxJobs, limiterKey)
  if not maxJobs then
    return 0
  end
  local started = tonumber(redis.call("GET", limiterKey) or 0)
  if started < maxJobs then
    return 0
  end
  local remaining = redis.call("PTTL", limiterKey)
  if remaining > 0 then
    return remaining
  end
  if remaining == 0 then
    redis.call("DEL", limiterKey)
  end
  return 0
end
