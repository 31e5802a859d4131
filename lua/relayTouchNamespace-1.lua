--[[
  relayTouchNamespace-1: note in a prefix's registry of relay namespaces that one is in
  use for a while (dashboards find namespaces there). The registry is outside every
  namespace's hash tag, hence a call of its own; it and its entries expire by themselves.

  KEYS[1]  <prefix>::relay:namespaces (namespace -> in use until, ms)
  ARGV     1 namespace, 2 in use for (ms)
]]
--- @include "includes/relayTime"

local now = relayNow()
redis.call("ZADD", KEYS[1], "GT", now + tonumber(ARGV[2]), ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now)
redis.call("PEXPIREAT", KEYS[1], relayTopScore(KEYS[1]))
