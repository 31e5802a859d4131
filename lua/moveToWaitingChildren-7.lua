--[[
  moveToWaitingChildren-7: an active job waits for its children (the processor calls
  job.move_to_waiting_children(token) and raises WaitingChildrenError).

  KEYS: 1 active, 2 waiting-children, 3 job hash, 4 job dependencies,
        5 job unsuccessful, 6 stalled, 7 events
  ARGV: 1 lock token ("0" skips the lock check), 2 one child's full key or "",
        3 timestamp (ms), 4 job id, 5 key prefix

  With a child key, the job only waits when that child is still pending; without
  one, when any child is. Waiting means: the lock is checked and deleted (see
  removeLock), the job leaves active and stalled, enters waiting-children (score =
  timestamp) and the event "waiting-children" (prev "active") is written.

  Returns 0 (moved), 1 (nothing pending: the job stays active, its lock untouched),
  -1 job missing, -2 no lock, -6 another worker's lock, -3 not in active, -9 a child
  failed with failParentOnFailure (the job must fail, not wait).
]]
--- @include "includes/removeLock"

local jobKey = KEYS[3]
local jobId = ARGV[4]

if redis.call("EXISTS", jobKey) ~= 1 then
  return -1
end
if redis.call("ZCARD", KEYS[5]) ~= 0 then
  return -9
end

local pending
if ARGV[2] ~= "" then
  pending = redis.call("SISMEMBER", KEYS[4], ARGV[2]) == 1
else
  pending = redis.call("SCARD", KEYS[4]) > 0
end
if not pending then
  return 1
end

local code = removeLock(jobKey, KEYS[6], ARGV[1], jobId)
if code < 0 then
  return code
end
if redis.call("LREM", KEYS[1], -1, jobId) < 1 then
  return -3
end
redis.call("ZADD", KEYS[2], tonumber(ARGV[3]), jobId)
redis.call("XADD", KEYS[7], "*", "event", "waiting-children", "jobId", jobId, "prev", "active")
return 0
