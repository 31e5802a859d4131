--- @include "includes/getOrSetMaxEvents"
--- @include "includes/everyNextMillis"
--- @include "includes/enqueueSchedulerJob"
-- The run after a taken run of a job scheduler, as updateJobScheduler creates it (see that
-- script for the rules). k holds the keys: repeatKey, delayed, wait, meta, prioritized,
-- marker, id, events, pc, active. nextMillisArg is the next run's millis for a cron
-- scheduler (recomputed here for "every"), runOpts its options (unpacked), now the caller's
-- clock (ms, as text), producerId the taken run's id; seen keeps what one call has read once
-- (the events cap, read when first needed), and with seen.deferMarker (a table) a delayed
-- run leaves the delay marker to its caller (see enqueueSchedulerJob). Returns the created
-- run's id, or nil (the scheduler is gone, the taken run is not its upcoming one, or the
-- next run exists).
local function createNextSchedulerRun(k, nextMillisArg, schedulerId, runOpts, nowArg, prefix,
                                      producerId, seen)
  local now = tonumber(nowArg)
  local prevMillis = redis.call("ZSCORE", k.repeatKey, schedulerId)
  if not prevMillis then
    return nil
  end
  prevMillis = tonumber(prevMillis)
  if producerId ~= "repeat:" .. schedulerId .. ":" .. prevMillis then
    return nil
  end

  local schedulerKey = k.repeatKey .. ":" .. schedulerId
  local stored = redis.call("HMGET", schedulerKey, "name", "data", "every", "startDate", "offset")
  local nextMillis = tonumber(nextMillisArg)
  local every = tonumber(stored[3])
  local runRepeat = runOpts["repeat"]
  if not every and type(runRepeat) == "table" and runRepeat["every"] then
    every = tonumber(runRepeat["every"])
  end
  if every then
    local offset = stored[5] or (type(runRepeat) == "table" and runRepeat["offset"]) or 0
    nextMillis = everyNextMillis(prevMillis, every, now, offset, stored[4])
  end

  local jobId = "repeat:" .. schedulerId .. ":" .. nextMillis
  seen.maxEvents = seen.maxEvents or getOrSetMaxEvents(k.meta)
  local maxEvents = seen.maxEvents
  if redis.call("EXISTS", schedulerKey .. ":" .. nextMillis) == 1 then
    redis.call("XADD", k.events, "MAXLEN", "~", maxEvents, "*", "event", "duplicated", "jobId", jobId)
    return nil
  end

  redis.call("ZADD", k.repeatKey, nextMillis, schedulerId)
  redis.call("HINCRBY", schedulerKey, "ic", 1)
  redis.call("INCR", k.id)
  local delay = nextMillis - now
  if delay < 0 then
    delay = 0
  end
  enqueueSchedulerJob(k, prefix .. jobId, jobId, runOpts, stored[1], stored[2] or "{}", nowArg,
                      maxEvents, schedulerId, delay, seen.deferMarker)
  return jobId
end
