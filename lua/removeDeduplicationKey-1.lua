--[[
  removeDeduplicationKey-1: end a job's deduplication window, if it still owns it.

  KEYS[1]  de:<deduplication id>

  ARGV[1]  the job id

  Returns 1 when the key named this job and was deleted, else 0 (another job owns the
  id now, or there is no key).
]]
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
