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
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/everyNextMillis"
--- @include "includes/enqueueSchedulerJob"

local repeatKey = KEYS[1]
local schedulerId = ARGV[2]
local runOpts = cmsgpack.unpack(ARGV[4])
local now = tonumber(ARGV[5])
local prefix = ARGV[6]

local prevMillis = redis.call("ZSCORE", repeatKey, schedulerId)
if not prevMillis then
  return nil
end
prevMillis = tonumber(prevMillis)
if ARGV[7] ~= "repeat:" .. schedulerId .. ":" .. prevMillis then
  return nil
end

local schedulerKey = repeatKey .. ":" .. schedulerId
local stored = redis.call("HMGET", schedulerKey, "name", "data", "every", "startDate", "offset")
local nextMillis = tonumber(ARGV[1])
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
local maxEvents = getOrSetMaxEvents(KEYS[5])
if redis.call("EXISTS", schedulerKey .. ":" .. nextMillis) == 1 then
  redis.call("XADD", KEYS[9], "MAXLEN", "~", maxEvents, "*", "event", "duplicated", "jobId", jobId)
  return nil
end

redis.call("ZADD", repeatKey, nextMillis, schedulerId)
redis.call("HINCRBY", schedulerKey, "ic", 1)
redis.call("INCR", KEYS[8])
local delay = nextMillis - now
if delay < 0 then
  delay = 0
end
local k = {wait = KEYS[3], active = KEYS[12], meta = KEYS[5], prioritized = KEYS[6], pc = KEYS[10],
           delayed = KEYS[2], marker = KEYS[7], events = KEYS[9]}
enqueueSchedulerJob(k, prefix .. jobId, jobId, runOpts, stored[1], stored[2] or "{}", ARGV[5],
                    maxEvents, schedulerId, delay)
return jobId .. ""
