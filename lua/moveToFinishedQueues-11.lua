--[[
  moveToFinishedQueues-11: active jobs of several queues of one Redis completed or failed
  for good, in one call; each is finished exactly as moveToFinished-14 finishes it, one
  after the other, and nothing else runs in between. A pool's workers (one per queue, on
  one hub) send the finishes of their jobs that end in the same turn this way: one script
  call for the turn instead of one a queue. BullMQ has no such script; it changes nothing
  a Node worker or producer sees (every job's keys, events and answer are those of its own
  moveToFinished-14). Single Redis or Sentinel only: the keys of several queues do not
  share a Cluster slot.

  KEYS  11 for each queue, in the order of the queues in ARGV, as moveToFinishedMany-11
        takes them: 1 wait, 2 active, 3 prioritized, 4 events, 5 stalled, 6 limiter,
        7 delayed, 8 paused (unused), 9 meta, 10 pc, 11 marker
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
local k = 0
local at = 1
while at <= #ARGV do
  local keyPrefix = ARGV[at]
  local count = tonumber(ARGV[at + 1]) or 0
  at = at + 2
  for _ = 1, count do
    local jobId = ARGV[at]
    local target = ARGV[at + 4]
    local ok, answer = pcall(finishActiveJob, KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4],
                             KEYS[k + 5], KEYS[k + 6], KEYS[k + 7], KEYS[k + 9], KEYS[k + 10],
                             keyPrefix .. target, keyPrefix .. jobId,
                             keyPrefix .. "metrics:" .. target, KEYS[k + 11], jobId, ARGV[at + 1],
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
  k = k + 11
end
return answers
