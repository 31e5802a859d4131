--[[
  getMetrics-2: the per-minute metrics a worker records when it finishes jobs.

  KEYS[1]  metrics:completed or metrics:failed (hash: count, prevTS, prevCount)
  KEYS[2]  the same key with ":data" (list: jobs per minute, newest first)

  ARGV[1]  first index of the data list to return
  ARGV[2]  last index (-1 = to the end)

  Returns {{count, prevTS, prevCount}, data points in the range, length of the data list}.
  A missing field is nil (false in the reply); the caller reads it as 0.
]]
local summary = redis.call("HMGET", KEYS[1], "count", "prevTS", "prevCount")
local first = tonumber(ARGV[1]) or 0
local last = tonumber(ARGV[2]) or -1
return {summary, redis.call("LRANGE", KEYS[2], first, last), redis.call("LLEN", KEYS[2])}
