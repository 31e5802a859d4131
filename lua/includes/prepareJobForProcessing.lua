--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/incrementJobCounter"
-- Hand a job that just entered active (and whose hash claimJobHash stamped with
-- processedOn and the worker's name) to the fetching worker.
--   * a non-integer "ats" (garbage) restarts at 1 and the job gets a deferred failure
--     ("defa") naming the field
--   * rate limiter: when a maximum applies (maxJobs), count this start; the first start
--     of a window sets the window length. A job carrying "defa" is only going to be failed,
--     so it does not use up the limit.
--   * lock "<job>:lock" = token for lockDuration ms (token "0" takes no lock)
--   * "active" event (prev "waiting"), attempts started (ats) + 1
--   * base marker, so another blocked worker wakes and tries the next job
-- Returns {flat HGETALL of the job, jobId, 0, 0}.
local function prepareJobForProcessing(keyPrefix, limiterKey, eventsKey, jobId, now,
                                       maxJobs, windowMs, markerKey, opts)
  local jobKey = keyPrefix .. jobId
  if maxJobs and redis.call("HEXISTS", jobKey, "defa") == 0 then
    local window = tonumber(windowMs)
    -- without a window length a counter could never expire; such a limit is not counted
    if window then
      if redis.call("INCR", limiterKey) == 1 then
        redis.call("PEXPIRE", limiterKey, math.floor(math.abs(window)))
      end
    end
  end

  local token = opts["token"]
  if token ~= "0" then
    redis.call("SET", jobKey .. ":lock", token, "PX", opts["lockDuration"])
  end

  redis.call("XADD", eventsKey, "*", "event", "active", "jobId", jobId, "prev", "waiting")
  local _, badStarts = incrementJobCounter(jobKey, "ats")
  if badStarts and redis.call("HEXISTS", jobKey, "defa") == 0 then
    -- the job fails at once, with the reason, in whichever worker took it (Node's too)
    redis.call("HSET", jobKey, "defa", "job hash field 'ats' is not an integer: " .. tostring(badStarts))
  end

  addBaseMarkerIfNeeded(markerKey, false)
  return {redis.call("HGETALL", jobKey), jobId, 0, 0}
end
