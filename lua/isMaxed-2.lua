--[[
  isMaxed-2: is the queue at its global concurrency?

  KEYS[1]  meta
  KEYS[2]  active

  Returns 1 when meta "concurrency" is set and the active list holds at least that
  many jobs, else 0.
]]
local limit = tonumber(redis.call("HGET", KEYS[1], "concurrency"))
if limit and redis.call("LLEN", KEYS[2]) >= limit then
  return 1
end
return 0
