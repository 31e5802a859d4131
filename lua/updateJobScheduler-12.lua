--[[
  updateJobScheduler-12: a worker took a scheduler's run; create the run after it.

  KEYS[1]  repeat         KEYS[2]  delayed      KEYS[3]  wait         KEYS[4]  paused
  KEYS[5]  meta           KEYS[6]  prioritized  KEYS[7]  marker       KEYS[8]  id
  KEYS[9]  events         KEYS[10] pc           KEYS[11] key of the taken run (unused)
  KEYS[12] active

  ARGV[1]  millis of the next run (cron schedulers; recomputed here for "every")
  ARGV[2]  scheduler id
  ARGV[3]  data as JSON text (unused: the scheduler's stored data is used)
  ARGV[4]  msgpack map of the next run's options (stored form)
  ARGV[5]  now (ms)
  ARGV[6]  key prefix ("bull:q:")
  ARGV[7]  id of the taken run ("repeat:<scheduler>:<millis>")

  Returns the id of the run it created, or nil: when the scheduler is gone, when the taken
  run is not the scheduler's upcoming one (an older or a foreign run: whoever takes the
  upcoming run creates the next, so two workers never both do), or when the next run
  exists already (event "duplicated").

  The scheduler's score moves to the next run and its iteration count "ic" goes up by 1.
]]
--- @include "includes/createNextSchedulerRun"

local k = {repeatKey = KEYS[1], delayed = KEYS[2], wait = KEYS[3], meta = KEYS[5],
           prioritized = KEYS[6], marker = KEYS[7], id = KEYS[8], events = KEYS[9], pc = KEYS[10],
           active = KEYS[12]}
local jobId = createNextSchedulerRun(k, ARGV[1], ARGV[2], cmsgpack.unpack(ARGV[4]), ARGV[5], ARGV[6],
                                     ARGV[7], {})
if jobId then
  return jobId .. ""
end
return nil
