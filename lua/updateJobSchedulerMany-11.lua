--[[
  updateJobSchedulerMany-11: a worker took several runs of job schedulers of one queue; create
  the run after each, in one call. Each is created exactly as updateJobScheduler-12 creates
  it, one after the other, and nothing else runs in between. A worker sends the next runs of
  the runs it takes in the same turn (a cron burst) this way. BullMQ has no such script.

  KEYS  1 repeat, 2 delayed, 3 wait, 4 paused (unused), 5 meta, 6 prioritized, 7 marker,
        8 id, 9 events, 10 pc, 11 active (updateJobScheduler-12's, without the taken run's
        key, which it does not use)
  ARGV  1 key prefix ("bull:q:"), then 5 for each run, updateJobScheduler-12's ARGV 1, 2,
        4, 5 and 7: millis of the next run, scheduler id, msgpack options of the next run,
        now, id of the taken run

  Returns one answer per run, in order: the id of the run created, or 0 where
  updateJobScheduler-12 would have returned nil; or, when its creation raised an error, that
  error (the runs after it are still created).
]]
--- @include "includes/createNextSchedulerRun"
--- @include "includes/errorReply"

local k = {repeatKey = KEYS[1], delayed = KEYS[2], wait = KEYS[3], meta = KEYS[5],
           prioritized = KEYS[6], marker = KEYS[7], id = KEYS[8], events = KEYS[9], pc = KEYS[10],
           active = KEYS[11]}
local prefix = ARGV[1]
-- the delay marker is moved once, after all the runs: where each call would leave it; if
-- moving it fails, each run that went to delayed answers that error, as its call would have
local seen = {deferMarker = {}}
local answers = {}
local delayedRuns = {}
local count = (#ARGV - 1) / 5
for i = 0, count - 1 do
  local at = 1 + i * 5
  seen.deferMarker.delayed = false
  local ok, answer = pcall(function()
    return createNextSchedulerRun(k, ARGV[at + 1], ARGV[at + 2], cmsgpack.unpack(ARGV[at + 3]),
                                  ARGV[at + 4], prefix, ARGV[at + 5], seen)
  end)
  if seen.deferMarker.delayed then
    delayedRuns[#delayedRuns + 1] = i + 1
  end
  if not ok then
    answers[i + 1] = errorReply(answer)
  elseif answer then
    answers[i + 1] = answer .. ""
  else
    answers[i + 1] = 0
  end
end
if #delayedRuns > 0 then
  local moved, failure = pcall(addDelayMarkerIfNeeded, k.marker, k.delayed)
  if not moved then
    for _, at in ipairs(delayedRuns) do
      answers[at] = errorReply(failure)
    end
  end
end
return answers
