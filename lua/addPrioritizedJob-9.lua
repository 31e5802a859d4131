--[[
  Add a job with a priority >= 1 and no delay: docs/protocol.md, "Adding jobs".

  KEYS: 1 marker, 2 meta, 3 id, 4 prioritized, 5 delayed, 6 completed, 7 active,
        8 events, 9 pc (priority counter)
  ARGV: 1 msgpack array {key prefix, custom id or "", name, timestamp, parentKey,
          parent dependencies key, parent map, repeat job key, dedup key, defer flag}
        2 data as JSON text
        3 msgpack map of the encoded job options (short keys)

  Returns the job id (a string), or -5 (parent missing) / -7 (custom id owned by
  another parent), as addStandardJob.

  Score in prioritized: priority * 2^32 + (INCR pc) mod 2^32, so lower numbers run
  first and equal priorities keep arrival order.
]]
--- @include "includes/resolveNewJobId"
--- @include "includes/storeJobHash"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/addJobWithPriority"

local a = cmsgpack.unpack(ARGV[1])
local opts = cmsgpack.unpack(ARGV[3])

local finished, jobId, jobKey, maxEvents, parentJson =
  resolveNewJobId(a, opts, KEYS[3], KEYS[2], KEYS[6], KEYS[5], KEYS[8], ARGV[2])
if finished then
  return jobId
end

local _, priority = storeJobHash(jobKey, jobId, a[3], ARGV[2], opts, a[4], a[5], parentJson,
                                 a[8], KEYS[8])

local held = isQueuePausedOrMaxed(KEYS[2], KEYS[7])
addJobWithPriority(KEYS[4], priority, jobId, KEYS[9])
addBaseMarkerIfNeeded(KEYS[1], held)

redis.call("XADD", KEYS[8], "MAXLEN", "~", maxEvents, "*", "event", "waiting", "jobId", jobId)

if a[6] ~= nil then
  redis.call("SADD", a[6], jobKey)
end
return jobId
