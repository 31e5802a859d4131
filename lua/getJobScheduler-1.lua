--[[
  getJobScheduler-1: one job scheduler as stored.

  KEYS[1]  repeat
  ARGV[1]  scheduler id

  Returns {flat field/value list of repeat:<id>, millis of its upcoming run} or
  {nil, nil} when the id is not in the repeat ZSET.
]]
local millis = redis.call("ZSCORE", KEYS[1], ARGV[1])
if millis then
  return {redis.call("HGETALL", KEYS[1] .. ":" .. ARGV[1]), millis}
end
return {nil, nil}
