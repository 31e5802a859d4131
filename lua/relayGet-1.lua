--[[
  relayGet-1: read-only views of a relay namespace, for dashboards. Lists page like the
  queue getters: start and end are inclusive positions, end -1 is "to the end".

  KEYS[1]  <base>:nodes
  ARGV     1 base key, 2 view, 3 start, 4 end, 5 subscriptions filter ("", "node" or
           "pattern"), 6 the filter's node id or pattern

  Views and their answers:
    counts         {nodes, subscriptions, patterns, retained}
    used           1 when a node is alive or a message retained, else 0 (one number)
    nodes          one {id, registered at, lease end, info, last heartbeat, backlog,
                   dropped, subscriptions} a node, in order of registration (a node whose
                   lease ended but that is not swept yet has "" for info and heartbeat)
    subscriptions  one {node, endpoint, pattern} a subscription
    patterns       one {pattern, subscriptions} a pattern, by pattern
    retained       one {topic, expires at, mid, ts, data} a message, by expiry
]]
--- @include "includes/relayIndex"
--- @include "includes/relayTime"

local base, view = ARGV[1], ARGV[2]
local first, last = tonumber(ARGV[3]), tonumber(ARGV[4])
local subs = base .. ":subs"
local retained = base .. ":retained"

-- the LIMIT offset and count of the inclusive window [first, last]
local function limit()
  if last < 0 then
    return first, -1
  end
  return first, math.max(0, last - first + 1)
end

local function count(prefix)
  local lo, hi = relayLex(prefix)
  return redis.call("ZLEXCOUNT", subs, lo, hi)
end

-- the members of one view, in lexical order, without their prefix
local function page(prefix)
  local offset, n = limit()
  if n == 0 then
    return {}
  end
  local lo, hi = relayLex(prefix)
  local out = {}
  for i, member in ipairs(redis.call("ZRANGEBYLEX", subs, lo, hi, "LIMIT", offset, n)) do
    out[i] = string.sub(member, #prefix + 1)
  end
  return out
end

if view == "counts" then
  return {redis.call("ZCARD", KEYS[1]), count("n|"), count("t|"),
          redis.call("ZCOUNT", retained, relayNow() + 1, "+inf")}
end
if view == "used" then
  local after = relayNow() + 1
  if redis.call("ZCOUNT", KEYS[1], after, "+inf") > 0 or redis.call("ZCOUNT", retained, after, "+inf") > 0 then
    return 1
  end
  return 0
end

local rows = {}
if view == "nodes" then
  local started = redis.call("ZRANGE", base .. ":started", first, last, "WITHSCORES")
  for i = 1, #started, 2 do
    local node = started[i]
    local rec = redis.call("HMGET", base .. ":" .. node .. ":node", "info", "hb", "backlog", "dropped")
    rows[#rows + 1] = {node, started[i + 1], redis.call("ZSCORE", KEYS[1], node) or "",
      rec[1] or "", rec[2] or "", rec[3] or "0", rec[4] or "0", count("n|" .. node .. "|")}
  end
elseif view == "subscriptions" then
  local filter, value = ARGV[5], ARGV[6]
  if filter == "node" then
    for _, rest in ipairs(page("n|" .. value .. "|")) do
      local endpoint, pattern = relaySplitPair(rest)
      rows[#rows + 1] = {value, endpoint, pattern}
    end
  elseif filter == "pattern" then
    for _, rest in ipairs(page("p|" .. value .. "|")) do
      local node, endpoint = relaySplitPair(rest)
      rows[#rows + 1] = {node, endpoint, value}
    end
  else
    for _, rest in ipairs(page("n|")) do
      local node, tail = relaySplitPair(rest)
      local endpoint, pattern = relaySplitPair(tail)
      rows[#rows + 1] = {node, endpoint, pattern}
    end
  end
elseif view == "patterns" then
  for _, pattern in ipairs(page("t|")) do
    rows[#rows + 1] = {pattern, count("p|" .. pattern .. "|")}
  end
elseif view == "retained" then
  local offset, n = limit()
  if n ~= 0 then
    local topics = redis.call("ZRANGEBYSCORE", retained, relayNow() + 1, "+inf", "WITHSCORES",
      "LIMIT", offset, n)
    for i = 1, #topics, 2 do
      local msg = redis.call("HMGET", base .. ":" .. topics[i] .. ":ret", "m", "ts", "d")
      if msg[1] then
        rows[#rows + 1] = {topics[i], topics[i + 1], msg[1], msg[2], msg[3]}
      end
    end
  end
end
return rows
