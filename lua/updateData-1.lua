--[[
  updateData-1: replace a job's data.

  KEYS[1]  job hash
  ARGV[1]  the new data as JSON text

  Returns 0, or -1 when the job hash does not exist.
]]
if redis.call("EXISTS", KEYS[1]) == 0 then
  return -1
end
redis.call("HSET", KEYS[1], "data", ARGV[1])
return 0
