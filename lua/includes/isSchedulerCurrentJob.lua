-- True when the job is the upcoming iteration of a job scheduler: its "rjk" names a
-- scheduler in the repeat ZSET and its id is "repeat:<scheduler>:<that score>".
-- Removing such a job would silently end the schedule.
local function isSchedulerCurrentJob(jobId, jobKey, repeatKey)
  local schedulerId = redis.call("HGET", jobKey, "rjk")
  if not schedulerId then
    return false
  end
  local nextMillis = redis.call("ZSCORE", repeatKey, schedulerId)
  if not nextMillis then
    return false
  end
  return jobId == "repeat:" .. schedulerId .. ":" .. nextMillis
end
