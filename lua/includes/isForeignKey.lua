-- Whether a job id names a key that is not a job: it exists and is not a hash (a foreign
-- producer wrote a string, list... under the job's name). Such an id cannot be run,
-- failed or stalled without every write to it raising.
local function isForeignKey(jobKey)
  local t = redis.call("TYPE", jobKey)["ok"]
  return t ~= "hash" and t ~= "none"
end
