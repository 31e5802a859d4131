-- The first read of a pick-up: the job hash, flat, as HGETALL gives it. Made under pcall,
-- it is also the check that the id names a job: a key that is not a hash (a foreign
-- producer wrote a string, list... under the job's name) refuses it with WRONGTYPE, and the
-- caller drops the id. A key that does not exist reads as an empty hash; the pick-up's
-- write makes it one (the job fails later for having none of a job's fields).
-- Returns the flat fields, or nil for a key that is not a hash.
local function claimJobHash(jobKey)
  local res = redis.pcall("HGETALL", jobKey)
  if res["err"] ~= nil then
    return nil
  end
  return res
end
