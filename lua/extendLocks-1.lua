--[[
  extendLocks-1: renew the locks of many jobs in one call (the worker's renewal tick).

  KEYS  1 stalled
  ARGV  1 key prefix, 2 msgpack array of tokens, 3 msgpack array of job ids (same order),
        4 lock duration (ms)

  Every lock that still holds its token is set again for duration ms and its job leaves
  the stalled set. Returns the ids whose lock was missing or held by another token.
]]
local keyPrefix = ARGV[1]
local tokens = cmsgpack.unpack(ARGV[2])
local ids = cmsgpack.unpack(ARGV[3])
local duration = ARGV[4]
local lost = {}
for i = 1, #ids do
  local id = ids[i]
  local lockKey = keyPrefix .. id .. ":lock"
  local holder = redis.call("GET", lockKey)
  if holder and holder == tokens[i] then
    redis.call("SET", lockKey, holder, "PX", duration)
    redis.call("SREM", KEYS[1], id)
  else
    lost[#lost + 1] = id
  end
end
return lost
