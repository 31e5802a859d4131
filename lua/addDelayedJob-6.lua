--[[
  Add a job that must wait: opts.delay > 0 (docs/protocol.md, "Adding jobs"). A delayed job with a
  priority enters prioritized when it is promoted.

  KEYS: 1 marker, 2 meta, 3 id, 4 delayed, 5 completed, 6 events
  ARGV: 1 msgpack array {key prefix, custom id or "", name, timestamp, parentKey,
          parent dependencies key, parent map, repeat job key, dedup key, defer flag}
        2 data as JSON text
        3 msgpack map of the encoded job options (short keys)

  Returns the job id (a string), or -5 (parent missing) / -7 (custom id owned by
  another parent), as addStandardJob.

  Score in delayed: due * 4096 + a sequence number within that millisecond, with
  due = timestamp + delay. The "delayed" event carries the due time; the delay
  marker (member "1") is moved to the earliest due time so a blocked worker wakes
  when the first delayed job is due.
]]
--- @include "includes/resolveNewJobId"
--- @include "includes/storeJobHash"
--- @include "includes/getDelayedScore"
--- @include "includes/addDelayMarkerIfNeeded"

local a = cmsgpack.unpack(ARGV[1])
local opts = cmsgpack.unpack(ARGV[3])

local finished, jobId, jobKey, maxEvents, parentJson =
  resolveNewJobId(a, opts, KEYS[3], KEYS[2], KEYS[5], KEYS[4], KEYS[6], ARGV[2])
if finished then
  return jobId
end

local delay = storeJobHash(jobKey, jobId, a[3], ARGV[2], opts, a[4], a[5], parentJson,
                           a[8], KEYS[6])

local score, due = getDelayedScore(KEYS[4], a[4], delay)
redis.call("ZADD", KEYS[4], score, jobId)
redis.call("XADD", KEYS[6], "MAXLEN", "~", maxEvents, "*", "event", "delayed", "jobId", jobId,
           "delay", due)
addDelayMarkerIfNeeded(KEYS[1], KEYS[4])

if a[6] ~= nil then
  redis.call("SADD", a[6], jobKey)
end
return jobId
