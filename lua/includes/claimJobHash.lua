-- The first write of a pick-up: processedOn (and "pb", the worker's name, when given) on
-- the job hash. Made under pcall, it is also the check that the id names a job: a key that
-- is not a hash (a foreign producer wrote a string, list... under the job's name) refuses
-- it with WRONGTYPE, and the caller drops the id. A key that does not exist becomes a hash
-- (the job fails later for having none of a job's fields).
-- Returns true when the write was made.
local function claimJobHash(jobKey, now, name)
  local res
  if name then
    res = redis.pcall("HSET", jobKey, "processedOn", now, "pb", name)
  else
    res = redis.pcall("HSET", jobKey, "processedOn", now)
  end
  return type(res) ~= "table" or res["err"] == nil
end
