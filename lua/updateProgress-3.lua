--[[
  updateProgress-3: store a job's progress and announce it.

  KEYS[1]  job hash
  KEYS[2]  events
  KEYS[3]  meta

  ARGV[1]  job id
  ARGV[2]  progress as JSON text (a number or an object)

  Returns 0, or -1 when the job hash does not exist. Writes the event "progress"
  with the JSON text in the field "data".
]]
--- @include "includes/getOrSetMaxEvents"

if redis.call("EXISTS", KEYS[1]) == 0 then
  return -1
end
local cap = getOrSetMaxEvents(KEYS[3])
redis.call("HSET", KEYS[1], "progress", ARGV[2])
redis.call("XADD", KEYS[2], "MAXLEN", "~", cap, "*", "event", "progress",
  "jobId", ARGV[1], "data", ARGV[2])
return 0
