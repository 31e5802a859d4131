--[[
  relaySubscribe-1: subscribe an endpoint of a node to a topic or pattern. For a topic
  without wildcards the topic's retained message comes back in the same call, so no
  message can fall between it and the subscription.

  KEYS[1]  <base>:nodes
  ARGV     1 base key, 2 node id, 3 endpoint id, 4 topic or pattern

  Returns {added (1 new, 0 already subscribed), retained mid, ts, data} with "" for
  the three when there is no retained message; -2 bad pattern; -3 the node is not
  registered (or its lease ended); -5 bad node or endpoint id.
]]
--- @include "includes/relayIndex"

local base, node, endpoint, pattern = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not (relayValidId(node) and relayValidId(endpoint)) then
  return -5
end
local parts = relayParse(pattern, true)
if not parts then
  return -2
end
if redis.call("ZSCORE", KEYS[1], node) == false
    or redis.call("EXISTS", base .. ":" .. node .. ":node") == 0 then
  return -3
end
local subs = base .. ":subs"
local wild = relayIsWild(parts)
local added = redis.call("ZADD", subs, 0, "n|" .. node .. "|" .. endpoint .. "|" .. pattern)
if added == 1 then
  redis.call("ZADD", subs, 0, "p|" .. pattern .. "|" .. node .. "|" .. endpoint, 0, "t|" .. pattern)
  if wild then
    -- exact topics are looked up directly on publish; only wildcards need the buckets
    redis.call("ZADD", subs, 0, "w|" .. relayBucket(parts) .. "|" .. pattern)
  end
  if redis.call("PTTL", subs) == -1 then
    -- a new index lives as long as the namespace's other routing keys
    redis.call("PEXPIRE", subs, math.max(1, redis.call("PTTL", KEYS[1])))
  end
end
if not wild then
  local kept = redis.call("HMGET", base .. ":" .. pattern .. ":ret", "m", "ts", "d")
  if kept[1] then
    return {added, kept[1], kept[2], kept[3]}
  end
end
return {added, "", "", ""}
