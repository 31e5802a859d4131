--[[
  removeJob-2: remove a job, and by default its children, whatever state it is in.

  KEYS[1]  job hash
  KEYS[2]  repeat (the job schedulers ZSET)

  ARGV[1]  job id
  ARGV[2]  "1" to remove the job's children too (recursively, across queues)
  ARGV[3]  key prefix ("bull:q:")

  Returns 1 when removed (also when there was nothing to remove), 0 when the job or,
  with ARGV[2] = "1", one of its pending children is locked by a worker (nothing is
  changed), -8 when the job is the upcoming iteration of a job scheduler (remove the
  scheduler instead).

  A removed job leaves its parent's pending children; if it was the last one, the
  parent moves on to wait/prioritized ("waiting", prev "waiting-children"). Every
  removed job writes "removed" (jobId, prev = the state it left) to its queue's stream.
]]
--- @include "includes/isSchedulerCurrentJob"
--- @include "includes/isJobLocked"
--- @include "includes/removeJobTree"

local jobId = ARGV[1]
local withChildren = ARGV[2] == "1"
local prefix = ARGV[3]

if isSchedulerCurrentJob(jobId, KEYS[1], KEYS[2]) then
  return -8
end
if isJobLocked(prefix, jobId, withChildren) then
  return 0
end
removeJobTree(prefix, jobId, nil, withChildren)
return 1
