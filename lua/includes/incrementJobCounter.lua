-- Add 1 to a counter field of a job hash (atm, ats, stc). A value that is not an integer
-- (a foreign producer's garbage) would make HINCRBY raise halfway through the calling
-- script and leave its earlier writes in place; here it counts as 0 instead.
-- Returns the new count and, when the old value was not an integer, that value.
local function incrementJobCounter(jobKey, field)
  local count = redis.pcall("HINCRBY", jobKey, field, 1)
  if type(count) == "number" then
    return count, nil
  end
  local bad = redis.call("HGET", jobKey, field)
  redis.call("HSET", jobKey, field, 1)
  return 1, bad
end
