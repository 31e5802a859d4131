-- The server's clock in ms (leases and expiries never use a node's clock), and the
-- highest score of a sorted set (0 when empty).
local function relayNow()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function relayTopScore(key)
  local top = redis.call("ZREVRANGE", key, 0, 0, "WITHSCORES")
  if top[2] then
    return tonumber(top[2])
  end
  return 0
end
