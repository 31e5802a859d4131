--[[
  Add a job that can run now (no delay, priority 0): docs/protocol.md, "Adding jobs".

  KEYS: 1 wait, 2 paused (v5 legacy, unused), 3 meta, 4 id, 5 completed, 6 delayed,
        7 active, 8 events, 9 marker
  ARGV: 1 msgpack array {key prefix, custom id or "", name, timestamp, parentKey,
          parent dependencies key, parent map, repeat job key, dedup key, defer flag}
        2 data as JSON text
        3 msgpack map of the encoded job options (short keys)

  Returns the job id (a string): the new one, or the existing/surviving one for a
  duplicate custom id or a deduplicated add. -5: the parent hash does not exist;
  -7: the custom id belongs to another parent.

  FIFO jobs go to the left end of wait (workers pop from the right), lifo jobs to the
  right end so they run next. The base marker wakes a worker unless the queue is
  paused or at its global concurrency.
]]
--- @include "includes/resolveNewJobId"
--- @include "includes/storeJobHash"
--- @include "includes/isQueuePausedOrMaxed"
--- @include "includes/addBaseMarkerIfNeeded"

local a = cmsgpack.unpack(ARGV[1])
local opts = cmsgpack.unpack(ARGV[3])

local finished, jobId, jobKey, maxEvents, parentJson =
  resolveNewJobId(a, opts, KEYS[4], KEYS[3], KEYS[5], KEYS[6], KEYS[8], ARGV[2])
if finished then
  return jobId
end

storeJobHash(jobKey, jobId, a[3], ARGV[2], opts, a[4], a[5], parentJson, a[8], KEYS[8])

local held = isQueuePausedOrMaxed(KEYS[3], KEYS[7])
if opts["lifo"] then
  redis.call("RPUSH", KEYS[1], jobId)
else
  redis.call("LPUSH", KEYS[1], jobId)
end
addBaseMarkerIfNeeded(KEYS[9], held)

redis.call("XADD", KEYS[8], "MAXLEN", "~", maxEvents, "*", "event", "waiting", "jobId", jobId)

if a[6] ~= nil then
  redis.call("SADD", a[6], jobKey)
end
return jobId
