--[[
  relayRemoveEndpoint-1: remove every subscription of one endpoint of a node.

  KEYS[1]  <base>:nodes
  ARGV     1 base key, 2 node id, 3 endpoint id

  Returns how many subscriptions were removed.
]]
--- @include "includes/relayIndex"

return relayDropEndpoint(ARGV[1], ARGV[2], ARGV[3])
