--[[
  Add a job that waits for its children (a flow node with children; docs/protocol.md, "Flows"):
  it is stored like any other job and enters waiting-children instead of a queue.

  KEYS: 1 meta, 2 id, 3 delayed, 4 waiting-children, 5 completed, 6 events
  ARGV: 1 msgpack array {key prefix, custom id or "", name, timestamp, parentKey,
          parent dependencies key, parent map, repeat job key, dedup key, defer flag}
        2 data as JSON text
        3 msgpack map of the encoded job options (short keys)

  Returns the job id (a string), or -5 (parent missing) / -7 (custom id owned by
  another parent), as addStandardJob. The score in waiting-children is the job's
  timestamp; the event is "waiting-children". When the job has a parent it becomes
  one of the parent's pending children.

  The job's delay and priority are stored and only used when the last child is done
  and the job leaves waiting-children (see releaseParentIfReady).
]]
--- @include "includes/resolveNewJobId"
--- @include "includes/storeJobHash"

local a = cmsgpack.unpack(ARGV[1])
local opts = cmsgpack.unpack(ARGV[3])

local finished, jobId, jobKey, maxEvents, parentJson =
  resolveNewJobId(a, opts, KEYS[2], KEYS[1], KEYS[5], KEYS[3], KEYS[6])
if finished then
  return jobId
end

storeJobHash(jobKey, jobId, a[3], ARGV[2], opts, a[4], a[5], parentJson, a[8], KEYS[6])

redis.call("ZADD", KEYS[4], a[4], jobId)
redis.call("XADD", KEYS[6], "MAXLEN", "~", maxEvents, "*", "event", "waiting-children",
           "jobId", jobId)

if a[6] ~= nil then
  redis.call("SADD", a[6], jobKey)
end
return jobId
