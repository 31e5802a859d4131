--[[
  moveToFinishedMany-11: several active jobs of one queue completed or failed for good, in
  one call; each is finished exactly as moveToFinished-14 finishes it, one after the other,
  and nothing else runs in between. A worker sends the finishes of its jobs that end in the
  same turn this way: one script call instead of one each. BullMQ has no such script.

  KEYS  1 wait, 2 active, 3 prioritized, 4 events, 5 stalled, 6 limiter, 7 delayed,
        8 paused (unused), 9 meta, 10 pc, 11 marker
  ARGV  1 key prefix ("bull:q:"), then 8 for each job, moveToFinished-14's ARGV without the
        prefix: jobId, now, "returnvalue" or "failedReason", its value, "completed" or
        "failed", fetch next "1"/"0", msgpack options, msgpack fields to set first ("" for
        none)

  A job's own keys (its hash, the completed or failed set, its metrics key) are made from
  the prefix, as moveToFinished-14 receives them.

  Returns one answer per job, in order: what moveToFinished-14 would have returned for it
  (0, a negative code, or the next job it fetched), or, when its finish raised an error
  (it stops there, as that script would have), that error; the jobs after it are still
  finished.
]]
--- @include "includes/finishActiveJob"
--- @include "includes/errorReply"

local keyPrefix = ARGV[1]
local answers = {}
local count = (#ARGV - 1) / 8
for i = 0, count - 1 do
  local at = 1 + i * 8
  local jobId = ARGV[at + 1]
  local target = ARGV[at + 5]
  local ok, answer = pcall(finishActiveJob, KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6],
                           KEYS[7], KEYS[9], KEYS[10], keyPrefix .. target, keyPrefix .. jobId,
                           keyPrefix .. "metrics:" .. target, KEYS[11], jobId, ARGV[at + 2],
                           ARGV[at + 3], ARGV[at + 4], target, ARGV[at + 6], keyPrefix,
                           ARGV[at + 7], ARGV[at + 8])
  if ok then
    answers[i + 1] = answer
  else
    answers[i + 1] = errorReply(answer)
  end
end
return answers
