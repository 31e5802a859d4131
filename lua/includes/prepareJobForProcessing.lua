--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/counterAfterOne"
--- @include "includes/incrementJobCounter"
-- Set a field in a flat HGETALL reply: at its place (at, the index of its name), or at the end.
local function patchJobField(fields, at, field, value)
  if at > 0 then
    fields[at + 1] = value
  else
    fields[#fields + 1] = field
    fields[#fields + 1] = value
  end
end

-- Hand a job that just entered active (fields: its hash as claimJobHash read it, flat) to
-- the fetching worker.
--   * rate limiter: when a maximum applies (maxJobs), count this start; the first start
--     of a window sets the window length. A job carrying "defa" is only going to be failed,
--     so it does not use up the limit.
--   * lock "<job>:lock" = token for lockDuration ms (token "0" takes no lock)
--   * "active" event (prev "waiting")
--   * one HSET: processedOn, "pb" (the worker's name) when given, attempts started (ats) + 1;
--     the fields read are patched to match, so no second read is needed. A non-integer
--     "ats" (garbage) restarts at 1 through incrementJobCounter, the job gets a deferred
--     failure ("defa") naming the field, and the hash is read again.
--   * base marker, so another blocked worker wakes and tries the next job
-- Returns {flat job hash, jobId, 0, 0}.
local function prepareJobForProcessing(keyPrefix, limiterKey, eventsKey, jobId, fields, now,
                                       maxJobs, windowMs, markerKey, opts)
  local jobKey = keyPrefix .. jobId
  -- where the fields written below sit in the flat read (0: absent)
  local atProcessedOn, atName, atStarts, hasDefa = 0, 0, 0, false
  for i = 1, #fields, 2 do
    local field = fields[i]
    if field == "ats" then
      atStarts = i
    elseif field == "processedOn" then
      atProcessedOn = i
    elseif field == "pb" then
      atName = i
    elseif field == "defa" then
      hasDefa = true
    end
  end

  if maxJobs and not hasDefa then
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
    local lockMs = opts["lockDuration"]
    if type(lockMs) == "number" then
      lockMs = string.format("%d", lockMs)  -- Redis 6.2 would format a number with "%.17g"
    end
    redis.call("SET", jobKey .. ":lock", token, "PX", lockMs)
  end

  redis.call("XADD", eventsKey, "*", "event", "active", "jobId", jobId, "prev", "waiting")

  local name = opts["name"]
  local counted, starts = counterAfterOne(atStarts > 0 and fields[atStarts + 1] or nil)
  if counted then
    if name then
      redis.call("HSET", jobKey, "processedOn", now, "pb", name, "ats", starts)
    else
      redis.call("HSET", jobKey, "processedOn", now, "ats", starts)
    end
    -- the same fields as a read after the write: changed in place, new ones at the end
    patchJobField(fields, atProcessedOn, "processedOn", now)
    if name then
      patchJobField(fields, atName, "pb", name)
    end
    patchJobField(fields, atStarts, "ats", starts)
  else
    if name then
      redis.call("HSET", jobKey, "processedOn", now, "pb", name)
    else
      redis.call("HSET", jobKey, "processedOn", now)
    end
    local _, badStarts = incrementJobCounter(jobKey, "ats")
    if badStarts and not hasDefa then
      -- the job fails at once, with the reason, in whichever worker took it (Node's too)
      redis.call("HSET", jobKey, "defa", "job hash field 'ats' is not an integer: " .. tostring(badStarts))
    end
    fields = redis.call("HGETALL", jobKey)
  end

  addBaseMarkerIfNeeded(markerKey, false)
  return {fields, jobId, 0, 0}
end
