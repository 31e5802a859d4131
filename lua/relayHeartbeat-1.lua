--[[
  relayHeartbeat-1: renew a relay node's lease.

  KEYS[1]  <base>:nodes
  ARGV     1 base key, 2 node id, 3 lease (ms)

  Returns 1 renewed; 0 the node holds no lease or has no record any more (expired,
  swept, unregistered): it must register again and subscribe again.
]]
--- @include "includes/relayNamespace"

local base, node = ARGV[1], ARGV[2]
local record = base .. ":" .. node .. ":node"
if redis.call("ZSCORE", KEYS[1], node) == false or redis.call("EXISTS", record) == 0 then
  return 0
end
local now = relayNow()
local lease = tonumber(ARGV[3])
redis.call("ZADD", KEYS[1], now + lease, node)
redis.call("HSET", record, "hb", now)
redis.call("PEXPIRE", record, lease)
redis.call("PEXPIRE", base .. ":" .. node .. ":inbox", lease)
relayRefreshNamespace(base, KEYS[1], now)
return 1
