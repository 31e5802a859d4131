--[[
  moveToActive-11: a worker asks for its next job.

  KEYS  1 wait, 2 active, 3 prioritized, 4 events, 5 stalled, 6 limiter, 7 delayed,
        8 paused (unused in v6, kept for the key count), 9 meta, 10 pc, 11 marker
  ARGV  1 key prefix ("bull:q:"), 2 now (ms; empty: the server's clock, read here),
        3 msgpack {token, lockDuration, limiter?, name?}

  An empty ARGV[2] is for a call written behind the worker's BZPOPMIN, which Redis runs
  only when the marker wait ends: the time of the call's writing would be stale by then.

  Returns {flat job hash, jobId, 0, nextDue, ready} when a job was moved to active,
  {0, 0, ttl, 0} when rate limited, {0, 0, 0, nextDue} when only delayed jobs remain, else
  {0, 0, 0, 0} (nothing to do, or the queue is paused or at its global concurrency).

  ready, a fifth element BullMQ's script does not return, is how many jobs wait and
  prioritized still hold after this pick-up: the worker asks for that many next (as far as
  its free slots go) instead of finding the end of a burst by pick-ups that come back
  empty. When it is 0 the pick-up was the last ready job: the base marker it (or the
  promotion of a due delayed job) left would only wake a worker for an empty fetch, so it
  is removed, as a fetch that finds nothing removes it, and nextDue says when the earliest
  delayed job is due (0: none), which the worker waits for.
]]
--- @include "includes/pickUp"

local now = pickUpTime(ARGV[2])
local workerOpts = cmsgpack.unpack(ARGV[3])
local fetched = fetchNextJob(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[9],
                             KEYS[10], KEYS[11], ARGV[1], now, workerOpts)
if fetched then
  if fetched[2] ~= 0 then
    noteReady(fetched, KEYS[1], KEYS[3], KEYS[11], KEYS[7])
  end
  return fetched
end
return {0, 0, 0, 0}
