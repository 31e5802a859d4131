--[[
  extendLock-2: renew one job lock.

  KEYS  1 "<job>:lock", 2 stalled
  ARGV  1 token, 2 lock duration (ms), 3 jobId

  Returns 1 when the lock held this token and now lasts another duration ms (the job also
  leaves the stalled set), 0 when the lock is gone or belongs to another token.
]]
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
redis.call("SREM", KEYS[2], ARGV[3])
return 1
