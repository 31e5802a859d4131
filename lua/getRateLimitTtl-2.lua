--[[
  getRateLimitTtl-2: how long workers are still held back by the rate limiter.

  KEYS[1]  limiter
  KEYS[2]  meta

  ARGV[1]  the limit to measure against (max jobs per window), or "0" for the queue's
           own global limit (meta "max")

  Returns the limiter's remaining ms once the window has reached the limit, else 0.
  With ARGV[1] "0" and no global limit it returns the key's plain PTTL (-2 no key, -1
  no expiry), which is how a manual Queue.rate_limit() is seen.
]]
--- @include "includes/getRateLimitTTL"

if ARGV[1] ~= "0" then
  return getRateLimitTTL(tonumber(ARGV[1]), KEYS[1])
end
local globalMax = redis.call("HGET", KEYS[2], "max")
if globalMax then
  return getRateLimitTTL(tonumber(globalMax), KEYS[1])
end
return redis.call("PTTL", KEYS[1])
