--[[
  getCountsPerPriority-2: how many ready jobs wait at each priority.

  KEYS[1]  wait
  KEYS[2]  prioritized

  ARGV     the priorities to count (integers >= 0)

  Returns one count per argument: priority 0 counts the wait list; any other priority
  counts the prioritized members whose score lies in that priority's band
  (priority * 2^32 up to the next band).
]]
local counts = {}
for i = 1, #ARGV do
  local priority = tonumber(ARGV[i])
  if priority == 0 then
    counts[i] = redis.call("LLEN", KEYS[1])
  else
    local low = priority * 4294967296
    counts[i] = redis.call("ZCOUNT", KEYS[2], string.format("%.0f", low),
                           string.format("%.0f", low + 4294967295))
  end
end
return counts
