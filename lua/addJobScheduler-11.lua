--[[
  addJobScheduler-11: create or replace a job scheduler and its upcoming run.

  KEYS[1]  repeat (ZSET: scheduler id -> millis of its upcoming run)
  KEYS[2]  delayed        KEYS[3]  wait         KEYS[4]  paused       KEYS[5]  meta
  KEYS[6]  prioritized    KEYS[7]  marker       KEYS[8]  id           KEYS[9]  events
  KEYS[10] pc (priority counter)                KEYS[11] active

  ARGV[1]  millis of the next run (cron schedulers; recomputed here for "every")
  ARGV[2]  msgpack map of the scheduler: name, tz?, pattern?, every?, limit?, startDate?,
           endDate?, offset?
  ARGV[3]  scheduler id
  ARGV[4]  template data as JSON text
  ARGV[5]  msgpack map of the template's job options (stored form)
  ARGV[6]  msgpack map of the options of the run to create (stored form)
  ARGV[7]  now (ms)
  ARGV[8]  key prefix ("bull:q:")
  ARGV[9]  producer key (unused; kept for BullMQ's argument order)

  Returns {run job id, delay}, or -10 when a cron run's id is taken by another job,
  -11 when 32 consecutive "every" slots are taken.

  The hash repeat:<id> is rewritten (name, tz, limit, pattern, startDate, endDate, every,
  offset, opts, data, ic), keeping its iteration count "ic" (1 for a new scheduler). A
  previous upcoming run that is still delayed, prioritized or waiting is deleted and, for
  an unchanged "every", its slot is reused; one that already started is left alone.
]]
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/everyNextMillis"
--- @include "includes/enqueueSchedulerJob"
--- @include "includes/unlinkFromParent"
--- @include "includes/dropOwnedDedupKey"
--- @include "includes/removeJobKeys"

local repeatKey = KEYS[1]
local k = {wait = KEYS[3], active = KEYS[11], meta = KEYS[5], prioritized = KEYS[6], pc = KEYS[10],
           delayed = KEYS[2], marker = KEYS[7], events = KEYS[9]}
local nextMillis = ARGV[1]
local schedulerOpts = cmsgpack.unpack(ARGV[2])
local schedulerId = ARGV[3]
local templateData = ARGV[4]
local templateOpts = cmsgpack.unpack(ARGV[5])
local runOpts = cmsgpack.unpack(ARGV[6])
local now = tonumber(ARGV[7])
local prefix = ARGV[8]
local schedulerKey = repeatKey .. ":" .. schedulerId
local maxEvents = getOrSetMaxEvents(KEYS[5])

local prevMillis = redis.call("ZSCORE", repeatKey, schedulerId)
if prevMillis then
  prevMillis = tonumber(prevMillis)
end

local every = schedulerOpts["every"]
local runRepeat = runOpts["repeat"]
local offset = schedulerOpts["offset"] or (type(runRepeat) == "table" and runRepeat["offset"]) or 0
local newOffset = offset
local everyChanged = false
if every then
  local fromMillis = prevMillis
  if prevMillis and tonumber(redis.call("HGET", schedulerKey, "every")) ~= every then
    fromMillis = nil
    everyChanged = true
  end
  nextMillis, newOffset = everyNextMillis(fromMillis, every, now, offset, schedulerOpts["startDate"])
end

-- The previous upcoming run is replaced only while no worker has taken it.
local function takeBackRun(jobId)
  local jobKey = prefix .. jobId
  local taken = redis.call("ZREM", k.delayed, jobId) == 1 or redis.call("ZREM", k.prioritized, jobId) == 1
  if not taken then
    local list = k.wait
    if redis.call("HEXISTS", k.meta, "paused") == 1 then
      list = KEYS[4]
    end
    taken = redis.call("LREM", list, 1, jobId) > 0
  end
  if taken then
    unlinkFromParent(jobKey, prefix, true)
    dropOwnedDedupKey(prefix, jobId, redis.call("HGET", jobKey, "deid"))
    removeJobKeys(jobKey)
  end
  return taken
end

local replaced = false
if prevMillis and redis.call("EXISTS", schedulerKey .. ":" .. prevMillis) == 1 then
  replaced = takeBackRun("repeat:" .. schedulerId .. ":" .. prevMillis)
end
if replaced then
  if every and not everyChanged then
    nextMillis = prevMillis
  end
else
  schedulerOpts["offset"] = newOffset
end

local jobId = "repeat:" .. schedulerId .. ":" .. nextMillis
local collision = false
if redis.call("EXISTS", prefix .. jobId) == 1 then
  if every then
    -- leftovers of an earlier scheduler with this id: look for a free slot further on
    local free = false
    for _ = 1, 32 do
      nextMillis = nextMillis + every
      jobId = "repeat:" .. schedulerId .. ":" .. nextMillis
      if redis.call("EXISTS", prefix .. jobId) == 0 then
        free = true
        break
      end
    end
    if not free then
      return -11
    end
  else
    collision = true
  end
end
if collision and not replaced then
  return -10
end

local delay = nextMillis - now
if delay < 0 then
  delay = 0
end

-- the scheduler hash, rewritten whole; the iteration count survives
redis.call("ZADD", repeatKey, nextMillis, schedulerId)
local fields = {"name", schedulerOpts["name"]}
for _, field in ipairs({"tz", "limit", "pattern", "startDate", "endDate", "every"}) do
  if schedulerOpts[field] then
    fields[#fields + 1] = field
    fields[#fields + 1] = schedulerOpts[field]
  end
end
local keptOffset = schedulerOpts["offset"] or tonumber(redis.call("HGET", schedulerKey, "offset"))
if keptOffset then
  fields[#fields + 1] = "offset"
  fields[#fields + 1] = keptOffset
end
local optsJson = cjson.encode(templateOpts)
if optsJson ~= "{}" then
  fields[#fields + 1] = "opts"
  fields[#fields + 1] = optsJson
end
if templateData and templateData ~= "{}" then
  fields[#fields + 1] = "data"
  fields[#fields + 1] = templateData
end
fields[#fields + 1] = "ic"
fields[#fields + 1] = redis.call("HGET", schedulerKey, "ic") or 1
redis.call("DEL", schedulerKey)
redis.call("HMSET", schedulerKey, unpack(fields))

redis.call("INCR", KEYS[8])
enqueueSchedulerJob(k, prefix .. jobId, jobId, runOpts, schedulerOpts["name"], templateData, now,
                    maxEvents, schedulerId, delay)
return {jobId .. "", delay}
