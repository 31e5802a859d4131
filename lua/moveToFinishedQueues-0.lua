--[[
  moveToFinishedQueues-0: active jobs of several queues of one Redis completed or failed
  for good, in one call; each is finished exactly as moveToFinished-14 finishes it, one
  after the other, and nothing else runs in between. A pool's workers (one per queue, on
  one hub) send the finishes of their jobs that end in the same turn this way: one script
  call for the turn instead of one a queue. BullMQ has no such script; it changes nothing
  a Node worker or producer sees (every job's keys, events and answer are those of its own
  moveToFinished-14). Single Redis or Sentinel only: it names no key, it makes each
  queue's keys from its prefix (BullMQ's names: wait, active, prioritized, events, stalled,
  limiter, delayed, meta, pc, marker), as the scripts make a job's keys; the keys of
  several queues do not share a Cluster slot anyway. Naming 11 keys a queue instead cost
  a pool over 100 queues more to send and parse than the finishes it batched saved.

  KEYS  none
  ARGV  for each queue: its key prefix ("bull:q:"), the number of its jobs, then 8 for
        each of its jobs, moveToFinished-14's ARGV without the prefix: jobId, now,
        "returnvalue" or "failedReason", its value, "completed" or "failed", fetch next
        "1"/"0", msgpack options, msgpack fields to set first ("" for none)

  Returns one answer per job, in the order of ARGV: what moveToFinished-14 would have
  returned for it (0, a negative code, or the next job of its queue it fetched), or, when
  its finish raised an error (it stops there, as that script would have), that error; the
  jobs after it are still finished.
]]
--- @include "includes/finishActiveJob"
--- @include "includes/errorReply"

local answers = {}
local done = 0
local at = 1
while at <= #ARGV do
  local keyPrefix = ARGV[at]
  local count = tonumber(ARGV[at + 1]) or 0
  at = at + 2
  -- the queue's keys (BullMQ's names), made once for its jobs of this call, in locals: in
  -- a table (grown one rehash at a time, then garbage) they cost a pool over 100 queues,
  -- a job of each queue a call, 2-12 us more of Redis's CPU a job (median 9, 8 rounds)
  local waitKey, activeKey, prioritizedKey = keyPrefix .. "wait", keyPrefix .. "active", keyPrefix .. "prioritized"
  local eventsKey, stalledKey, limiterKey = keyPrefix .. "events", keyPrefix .. "stalled", keyPrefix .. "limiter"
  local delayedKey, metaKey, pcKey = keyPrefix .. "delayed", keyPrefix .. "meta", keyPrefix .. "pc"
  local markerKey = keyPrefix .. "marker"
  for _ = 1, count do
    local jobId = ARGV[at]
    local target = ARGV[at + 4]
    local ok, answer = pcall(finishActiveJob, waitKey, activeKey, prioritizedKey, eventsKey, stalledKey,
                             limiterKey, delayedKey, metaKey, pcKey, keyPrefix .. target,
                             keyPrefix .. jobId, keyPrefix .. "metrics:" .. target, markerKey,
                             jobId, ARGV[at + 1],
                             ARGV[at + 2], ARGV[at + 3], target, ARGV[at + 5], keyPrefix,
                             ARGV[at + 6], ARGV[at + 7])
    done = done + 1
    if ok then
      answers[done] = answer
    else
      answers[done] = errorReply(answer)
    end
    at = at + 8
  end
end
return answers
