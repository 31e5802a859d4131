--[[
  addLog-2: append one line to a job's log.

  KEYS[1]  job hash
  KEYS[2]  the job's log list (<job>:logs)

  ARGV[1]  job id
  ARGV[2]  the line
  ARGV[3]  keepLogs: how many of the newest lines to keep, or "" to keep all

  Returns the number of lines the log holds afterwards, or -1 when the job hash does
  not exist. keepLogs 0 keeps nothing (the list is deleted, 0 is returned).
]]
if redis.call("EXISTS", KEYS[1]) == 0 then
  return -1
end

local total = redis.call("RPUSH", KEYS[2], ARGV[2])
local keep = tonumber(ARGV[3])
if keep == nil then
  return total
end
if keep <= 0 then
  redis.call("DEL", KEYS[2])
  return 0
end
if total > keep then
  redis.call("LTRIM", KEYS[2], -keep, -1)
  return keep
end
return total
