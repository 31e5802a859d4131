--[[
  moveToFinished-14: an active job completed or failed for good.

  KEYS  1 wait, 2 active, 3 prioritized, 4 events, 5 stalled, 6 limiter, 7 delayed,
        8 paused (unused), 9 meta, 10 pc, 11 completed or failed set, 12 job key,
        13 metrics:completed or metrics:failed, 14 marker
  ARGV  1 jobId, 2 now = finishedOn (ms), 3 "returnvalue" or "failedReason",
        4 its value (JSON text / plain text), 5 "completed" or "failed",
        6 fetch next "1"/"0", 7 key prefix,
        8 msgpack {token, keepJobs = {count?, age?, limit?}, lockDuration, attempts,
                   maxMetricsSize ("" = no metrics), limiter?, name?},
        9 optional msgpack flat array of job fields to set first

  Checks, in this order: the job exists (-1); to complete, no pending children (-4) and
  no failed children (-9); the lock (-6 other token, -2 none); the job is in active (-3).
  Then: deduplication id released (and a job stored for it meanwhile
  created), the parent told, attempts made + 1, the job kept in its set or deleted as
  keepJobs says (count 0 deletes, -1 or absent keeps all, n keeps the newest n; age in
  seconds with limit per call), events "completed"/"failed" (its XADD caps the stream at
  meta's opts.maxLenEvents; a cap of 0 empties the stream before it) and "retries-exhausted",
  metrics, and finally the next job fetched when asked.
  Returns the next job's 4-tuple (or {0,0,ttl,0} / {0,0,0,0} / {0,0,0,nextDue}) when
  fetching found anything to say; otherwise 0, with a "drained" event when wait, active
  and prioritized are all empty.
]]
--- @include "includes/finishActiveJob"

return finishActiveJob(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[9],
                       KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14], ARGV[1], ARGV[2], ARGV[3],
                       ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9])
