--[[
  relayUnregisterNode-1: a node leaves: its lease, record and inbox go at once, and at
  most 100 subscriptions are pruned (later sweeps prune the rest, or the namespace
  expires if this was its last node).

  KEYS[1]  <base>:nodes
  ARGV     1 base key, 2 node id

  Returns 1 removed, 0 the node held no lease.
]]
--- @include "includes/relayIndex"
--- @include "includes/relayNamespace"

local base = ARGV[1]
local now = relayNow()
local had = relayDropNode(base, KEYS[1], ARGV[2], now)
relayRefreshNamespace(base, KEYS[1], now)
relayPruneDropped(base, 100)
return had
