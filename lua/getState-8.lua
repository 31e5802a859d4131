--[[
  getState-8: the state a job is in, for Redis servers without LPOS (before 6.0.6).
  Same KEYS, ARGV and answers as getStateV2-8; lists are scanned with LRANGE.

  KEYS[1]  completed     KEYS[5]  wait
  KEYS[2]  failed        KEYS[6]  paused (legacy)
  KEYS[3]  delayed       KEYS[7]  waiting-children
  KEYS[4]  active        KEYS[8]  prioritized

  ARGV[1]  job id
]]
local id = ARGV[1]

local function listed(listKey)
  for _, entry in ipairs(redis.call("LRANGE", listKey, 0, -1)) do
    if entry == id then
      return true
    end
  end
  return false
end

local zsetStates = {
  {KEYS[1], "completed"}, {KEYS[2], "failed"}, {KEYS[3], "delayed"}, {KEYS[8], "prioritized"},
}
for _, entry in ipairs(zsetStates) do
  if redis.call("ZSCORE", entry[1], id) then
    return entry[2]
  end
end
if listed(KEYS[4]) then
  return "active"
end
if listed(KEYS[5]) or listed(KEYS[6]) then
  return "waiting"
end
if redis.call("ZSCORE", KEYS[7], id) then
  return "waiting-children"
end
return "unknown"
