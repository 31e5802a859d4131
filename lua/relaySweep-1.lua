--[[
  relaySweep-1: drop the nodes whose lease ended and the retained messages that
  expired, and prune at most 100 subscriptions of dropped nodes (this call's and those
  left by earlier calls). Any node may run it.

  KEYS[1]  <base>:nodes
  ARGV     1 base key, 2 most nodes to drop in this call

  Returns the ids of the nodes dropped.
]]
--- @include "includes/relayIndex"
--- @include "includes/relayNamespace"

local base = ARGV[1]
local most = tonumber(ARGV[2]) or 0
local dropped = {}
if most <= 0 then
  return dropped
end
local now = relayNow()
for _, node in ipairs(redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, most)) do
  relayDropNode(base, KEYS[1], node, now)
  dropped[#dropped + 1] = node
end
redis.call("ZREMRANGEBYSCORE", base .. ":retained", "-inf", now)
relayRefreshNamespace(base, KEYS[1], now)
relayPruneDropped(base, 100)
return dropped
