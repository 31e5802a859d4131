--[[
  relayPublish-1: publish a message on a topic. Every subscription whose pattern matches
  is found in the index, and each live node concerned gets one entry in its inbox
  naming its endpoints that match (an endpoint gets a message once, however many of
  its patterns match).

  KEYS[1]  <base>:nodes
  ARGV     1 base key, 2 topic (no wildcards), 3 data (serialized by the publisher),
           4 publish time (ms, the publisher's), 5 retain for (ms; 0 = not retained),
           6 largest data (bytes), 7 inbox max length for nodes whose record has none

  Returns {mid, nodes reached, endpoints reached}; -1 bad topic; -4 data too large.
  Nothing is written before both checks pass.
  Inbox entry fields: k "msg", t topic, m mid, ts time, d data, e endpoint ids joined
  with ",". An inbox full at its max length loses its oldest entry first; those not
  yet read are counted in the node record's "dropped".
]]
--- @include "includes/relayTopics"
--- @include "includes/relayNamespace"

local base, topic, data, ts = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local retainFor = tonumber(ARGV[5]) or 0
local parts = relayParse(topic, false)
if not parts then
  return -1
end
if #data > tonumber(ARGV[6]) then
  return -4
end

-- message ids: one counter per namespace; a new counter starts at the server time in
-- microseconds, so ids keep growing after an old counter expired
local midKey = base .. ":mid"
local mid
if redis.call("EXISTS", midKey) == 1 then
  mid = redis.call("INCR", midKey)
else
  local t = redis.call("TIME")
  mid = redis.call("INCRBY", midKey, t[1] .. string.format("%06d", tonumber(t[2])))
  redis.call("PEXPIRE", midKey, math.max(1, redis.call("PTTL", KEYS[1])))
end

if retainFor > 0 then
  local now = relayNow()
  local kept = base .. ":" .. topic .. ":ret"
  redis.call("HSET", kept, "m", mid, "ts", ts, "d", data)
  redis.call("PEXPIRE", kept, retainFor)
  local index = base .. ":retained"
  redis.call("ZADD", index, now + retainFor, topic)
  redis.call("ZREMRANGEBYSCORE", index, "-inf", now)
  redis.call("PEXPIREAT", index, relayTopScore(index))
  relayRefreshNamespace(base, KEYS[1], now)
end

local subs = base .. ":subs"
local order, byNode = {}, {}

local function addSubscribersOf(pattern)
  local prefix = "p|" .. pattern .. "|"
  local lo, hi = "[" .. prefix, "[" .. prefix .. "\255"
  for _, member in ipairs(redis.call("ZRANGEBYLEX", subs, lo, hi)) do
    local rest = string.sub(member, #prefix + 1)
    local bar = string.find(rest, "|", 1, true)
    local node, endpoint = string.sub(rest, 1, bar - 1), string.sub(rest, bar + 1)
    local target = byNode[node]
    if target == nil then
      target = {ids = {}, seen = {}}
      byNode[node] = target
      order[#order + 1] = node
    end
    if not target.seen[endpoint] then
      target.seen[endpoint] = true
      target.ids[#target.ids + 1] = endpoint
    end
  end
end

local function addWildcardsIn(bucket)
  local prefix = "w|" .. bucket .. "|"
  local lo, hi = "[" .. prefix, "[" .. prefix .. "\255"
  for _, member in ipairs(redis.call("ZRANGEBYLEX", subs, lo, hi)) do
    local pattern = string.sub(member, #prefix + 1)
    local pparts = relayParse(pattern, true)
    if pparts and relayMatches(pparts, parts) then
      addSubscribersOf(pattern)
    end
  end
end

addSubscribersOf(topic)   -- the exact subscriptions, looked up directly
addWildcardsIn(parts[1])  -- wildcard patterns that start with the topic's first segment
addWildcardsIn("*")       -- and those that start with a wildcard

local defaultMax = tonumber(ARGV[7])
local nodes, endpoints = 0, 0
for _, node in ipairs(order) do
  local record = base .. ":" .. node .. ":node"
  local ttl = redis.call("PTTL", record)
  if ttl > 0 then  -- a live node: the inbox lives exactly as long as the record
    local inbox = base .. ":" .. node .. ":inbox"
    local maxLen = tonumber(redis.call("HGET", record, "maxLen")) or defaultMax
    local excess = redis.call("XLEN", inbox) + 1 - maxLen
    if excess > 0 then
      -- entries up to the reader's position (fetched, or else consumed) were delivered:
      -- they are trimmed without being counted as dropped
      local reader = redis.call("HGET", record, "inFlight") or redis.call("HGET", record, "cursor") or "0-0"
      local delivered = 0
      if reader ~= "0-0" and reader ~= "0" then
        delivered = #redis.call("XRANGE", inbox, "-", reader, "COUNT", excess)
      end
      local trimmed = redis.call("XTRIM", inbox, "MAXLEN", maxLen - 1)
      if trimmed > delivered then
        redis.call("HINCRBY", record, "dropped", trimmed - delivered)
      end
    end
    local ids = byNode[node].ids
    redis.call("XADD", inbox, "*", "k", "msg", "t", topic, "m", mid, "ts", ts, "d", data,
      "e", table.concat(ids, ","))
    redis.call("PEXPIRE", inbox, ttl)
    nodes = nodes + 1
    endpoints = endpoints + #ids
  end
end
return {mid, nodes, endpoints}
