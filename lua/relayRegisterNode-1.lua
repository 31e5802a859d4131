--[[
  relayRegisterNode-1: register a relay node (or refresh its registration): its lease,
  its info and the length its inbox is kept to.

  KEYS[1]  <base>:nodes (node -> lease end, ms)
  ARGV     1 base key (<prefix>::relay:{<namespace>}), 2 node id, 3 lease (ms),
           4 info (JSON text, stored as given), 5 the caller's layout version,
           6 inbox max length

  Returns 1 registered; 0 the id's old subscriptions are still being pruned (at most
  100 a call): call again; -5 bad node id; -6 the namespace is laid out by another
  layout version.
  A node whose record is gone (new, expired, swept) is first dropped from routing
  completely, so that a recovering node never gets stale routes back.
]]
--- @include "includes/relayIndex"
--- @include "includes/relayNamespace"

local base, node = ARGV[1], ARGV[2]
local lease = tonumber(ARGV[3])
if not relayValidId(node) then
  return -5
end
local layout = redis.call("HGET", base .. ":layout", "layout")
if layout and layout ~= ARGV[5] then
  return -6
end
local now = relayNow()
local record = base .. ":" .. node .. ":node"
if redis.call("EXISTS", record) == 0 then
  relayDropNode(base, KEYS[1], node, now)
  relayRefreshNamespace(base, KEYS[1], now)
  relayPruneNode(base, node, 100)
  if redis.call("ZSCORE", base .. ":cleanup", node) then
    return 0
  end
end
redis.call("HSET", base .. ":layout", "layout", ARGV[5])
redis.call("ZADD", KEYS[1], now + lease, node)
redis.call("ZADD", base .. ":started", "NX", now, node)
redis.call("HSET", record, "info", ARGV[4], "hb", now, "maxLen", tonumber(ARGV[6]) or 10000)
redis.call("PEXPIRE", record, lease)
redis.call("PEXPIRE", base .. ":" .. node .. ":inbox", lease)
relayRefreshNamespace(base, KEYS[1], now)
return 1
