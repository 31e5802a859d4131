--- @include "includes/storeJobHash"
--- @include "includes/getDelayedScore"
--- @include "includes/addDelayMarkerIfNeeded"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/addJobWithPriority"
--- @include "includes/addBaseMarkerIfNeeded"
-- Create one run of a job scheduler: the job "repeat:<scheduler>:<millis>" with the
-- scheduler's name and data, opts with "delay" and "jobId" set, and the hash field "rjk"
-- naming the scheduler. A run in the future goes to delayed (event "delayed" with its due
-- time, delay marker moved); a run due now goes to prioritized or to wait (the right end
-- with lifo) and wakes a worker unless the queue is paused or maxed (event "waiting").
-- k is {wait, active, meta, prioritized, pc, delayed, marker, events}. With deferMarker (a
-- table), a delayed run only sets deferMarker.delayed, and the caller moves the delay marker
-- once after all the runs it creates (a call that creates several).
local function enqueueSchedulerJob(k, jobKey, jobId, opts, name, data, timestamp, maxEvents,
                                   schedulerId, delay, deferMarker)
  opts["delay"] = delay
  opts["jobId"] = jobId
  local _, priority = storeJobHash(jobKey, jobId, name, data, opts, timestamp, nil, nil,
                                   schedulerId, k.events)
  if delay ~= 0 then
    local score, due = getDelayedScore(k.delayed, timestamp, delay)
    redis.call("ZADD", k.delayed, score, jobId)
    redis.call("XADD", k.events, "MAXLEN", "~", maxEvents, "*", "event", "delayed", "jobId", jobId,
               "delay", due)
    if deferMarker then
      deferMarker.delayed = true
    else
      addDelayMarkerIfNeeded(k.marker, k.delayed)
    end
    return
  end
  local held = isQueuePausedOrMaxed(k.meta, k.active)
  if priority > 0 then
    addJobWithPriority(k.prioritized, priority, jobId, k.pc)
  elseif opts["lifo"] then
    redis.call("RPUSH", k.wait, jobId)
  else
    redis.call("LPUSH", k.wait, jobId)
  end
  addBaseMarkerIfNeeded(k.marker, held)
  redis.call("XADD", k.events, "MAXLEN", "~", maxEvents, "*", "event", "waiting", "jobId", jobId)
end
