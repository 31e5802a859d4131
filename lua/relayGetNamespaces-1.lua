--[[
  relayGetNamespaces-1: the namespaces of a prefix's registry that may still be in use,
  sorted by name. An entry only says until when a namespace may be in use (its nodes may
  have left earlier), so callers check each with relayGet's "used" view.

  KEYS[1]  <prefix>::relay:namespaces
]]
--- @include "includes/relayTime"

local names = redis.call("ZRANGEBYSCORE", KEYS[1], relayNow() + 1, "+inf")
table.sort(names)
return names
