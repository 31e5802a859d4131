--[[
  getStateV2-8: the state a job is in (needs LPOS, Redis 6.0.6 or newer).

  KEYS[1]  completed     KEYS[5]  wait
  KEYS[2]  failed        KEYS[6]  paused (legacy)
  KEYS[3]  delayed       KEYS[7]  waiting-children
  KEYS[4]  active        KEYS[8]  prioritized

  ARGV[1]  job id

  Returns the first match, checked in this order: "completed", "failed",
  "delayed", "prioritized", "active", "waiting" (wait or the legacy paused list),
  "waiting-children"; "unknown" when the id is in none of them.
]]
local id = ARGV[1]

local zsetStates = {
  {KEYS[1], "completed"}, {KEYS[2], "failed"}, {KEYS[3], "delayed"}, {KEYS[8], "prioritized"},
}
for _, entry in ipairs(zsetStates) do
  if redis.call("ZSCORE", entry[1], id) then
    return entry[2]
  end
end

if redis.call("LPOS", KEYS[4], id) then
  return "active"
end
if redis.call("LPOS", KEYS[5], id) or redis.call("LPOS", KEYS[6], id) then
  return "waiting"
end
if redis.call("ZSCORE", KEYS[7], id) then
  return "waiting-children"
end
return "unknown"
