--[[
  removeOrphanedJobs-1: delete job hashes that no state of their queue refers to.

  KEYS[1]  key prefix ("bull:q:")

  ARGV[1]              N, the number of state key suffixes that follow
  ARGV[2 .. N+1]       state key suffixes (wait, active, completed, ...); each is looked
                       up by its type: list, sorted set or set (others are skipped)
  ARGV[N+2]            M, the number of job sub-key suffixes that follow
  ARGV[N+3 .. N+M+2]   job sub-key suffixes (logs, lock, dependencies, ...)
  ARGV[N+M+3 ..]       candidate job ids

  A candidate found in none of the state keys loses its hash and the listed sub-keys.
  Returns how many candidates were removed.
]]
local base = KEYS[1]
local stateCount = tonumber(ARGV[1])
local states = {}
for i = 1, stateCount do
  local key = base .. ARGV[1 + i]
  states[#states + 1] = {key, redis.call("TYPE", key)["ok"]}
end
local subCount = tonumber(ARGV[stateCount + 2])
local subKeys = {}
for i = 1, subCount do
  subKeys[i] = ARGV[stateCount + 2 + i]
end

local function inList(key, id)
  local pos = redis.pcall("LPOS", key, id)
  if type(pos) == "table" and pos.err then  -- no LPOS before Redis 6.0.6
    for _, member in ipairs(redis.call("LRANGE", key, 0, -1)) do
      if member == id then
        return true
      end
    end
    return false
  end
  return pos ~= false and pos ~= nil
end

local function referenced(id)
  for _, state in ipairs(states) do
    local key, kind = state[1], state[2]
    if kind == "list" then
      if inList(key, id) then
        return true
      end
    elseif kind == "zset" then
      if redis.call("ZSCORE", key, id) then
        return true
      end
    elseif kind == "set" then
      if redis.call("SISMEMBER", key, id) == 1 then
        return true
      end
    end
  end
  return false
end

local removed = 0
for i = stateCount + subCount + 3, #ARGV do
  local id = ARGV[i]
  if not referenced(id) then
    local jobKey = base .. id
    local doomed = {jobKey}
    for _, suffix in ipairs(subKeys) do
      doomed[#doomed + 1] = jobKey .. ":" .. suffix
    end
    redis.call("DEL", unpack(doomed))
    removed = removed + 1
  end
end
return removed
