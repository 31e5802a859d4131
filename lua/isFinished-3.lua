--[[
  isFinished-3: has a job completed or failed?

  KEYS[1]  completed
  KEYS[2]  failed
  KEYS[3]  job hash

  ARGV[1]  job id
  ARGV[2]  "1" to also return the result (returnvalue or failedReason)

  Returns 0 not finished, 1 completed, 2 failed, -1 no such job. With ARGV[2] = "1"
  the answer is a list: {1, returnvalue}, {2, failedReason}, {0}, or
  {-1, "Missing key for job <job key>. isFinished"} (Node's Job.waitUntilFinished rejects
  with that text, and so does ours).
]]
local withResult = ARGV[2] == "1"
local jobKey = KEYS[3]

if redis.call("EXISTS", jobKey) == 0 then
  if withResult then
    return {-1, "Missing key for job " .. jobKey .. ". isFinished"}
  end
  return -1
end

if redis.call("ZSCORE", KEYS[1], ARGV[1]) then
  if withResult then
    return {1, redis.call("HGET", jobKey, "returnvalue")}
  end
  return 1
end

if redis.call("ZSCORE", KEYS[2], ARGV[1]) then
  if withResult then
    return {2, redis.call("HGET", jobKey, "failedReason")}
  end
  return 2
end

if withResult then
  return {0}
end
return 0
