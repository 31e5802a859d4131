--- @include "includes/relayTopics"
-- The subscription index of a namespace: one sorted set, <base>:subs, every member at
-- score 0 so that a lexical range picks one view ("|" is in no id or pattern):
--   n|<node>|<endpoint>|<pattern>   what a node (or one endpoint) subscribed to
--   p|<pattern>|<node>|<endpoint>   who subscribed to a pattern
--   t|<pattern>                     patterns with at least one subscriber
--   w|<bucket>|<pattern>            wildcard patterns, by bucket (relayBucket)

-- ZRANGEBYLEX bounds of the members that start with prefix.
local function relayLex(prefix)
  return "[" .. prefix, "[" .. prefix .. "\255"
end

local function relayAny(key, prefix)
  local lo, hi = relayLex(prefix)
  return redis.call("ZRANGEBYLEX", key, lo, hi, "LIMIT", 0, 1)[1] ~= nil
end

-- "a|b" -> "a", "b" (at the first "|").
local function relaySplitPair(text)
  local bar = string.find(text, "|", 1, true)
  return string.sub(text, 1, bar - 1), string.sub(text, bar + 1)
end

-- Drop one subscription; the pattern's t| and w| members go with its last subscriber.
local function relayDropSubscription(base, node, endpoint, pattern)
  local subs = base .. ":subs"
  local gone = redis.call("ZREM", subs, "n|" .. node .. "|" .. endpoint .. "|" .. pattern,
    "p|" .. pattern .. "|" .. node .. "|" .. endpoint)
  if not relayAny(subs, "p|" .. pattern .. "|") then
    redis.call("ZREM", subs, "t|" .. pattern)
    local parts = relayParse(pattern, true)
    if parts and relayIsWild(parts) then
      redis.call("ZREM", subs, "w|" .. relayBucket(parts) .. "|" .. pattern)
    end
  end
  return gone
end

-- Drop every subscription of one endpoint; returns how many there were.
local function relayDropEndpoint(base, node, endpoint)
  local prefix = "n|" .. node .. "|" .. endpoint .. "|"
  local lo, hi = relayLex(prefix)
  local members = redis.call("ZRANGEBYLEX", base .. ":subs", lo, hi)
  for _, member in ipairs(members) do
    relayDropSubscription(base, node, endpoint, string.sub(member, #prefix + 1))
  end
  return #members
end

-- Take a node out of routing at once: its lease, registration, inbox and record go now;
-- its subscriptions are queued in <base>:cleanup and pruned a bounded batch at a time.
-- Returns 1 if the node held a lease, else 0.
local function relayDropNode(base, nodesKey, node, now)
  local had = redis.call("ZREM", nodesKey, node)
  redis.call("ZREM", base .. ":started", node)
  redis.call("UNLINK", base .. ":" .. node .. ":inbox", base .. ":" .. node .. ":node")
  if relayAny(base .. ":subs", "n|" .. node .. "|") then
    redis.call("ZADD", base .. ":cleanup", now, node)
  end
  return had
end

-- Prune at most budget subscriptions of a dropped node; returns the budget left, at
-- least one less than given so that callers always move on.
local function relayPruneNode(base, node, budget)
  local prefix = "n|" .. node .. "|"
  local lo, hi = relayLex(prefix)
  local members = redis.call("ZRANGEBYLEX", base .. ":subs", lo, hi, "LIMIT", 0, budget)
  for _, member in ipairs(members) do
    local endpoint, pattern = relaySplitPair(string.sub(member, #prefix + 1))
    relayDropSubscription(base, node, endpoint, pattern)
  end
  if #members < budget then
    redis.call("ZREM", base .. ":cleanup", node)
  end
  if #members == 0 then
    return budget - 1
  end
  return budget - #members
end

-- Prune dropped nodes, the longest dropped first, within one shared budget.
local function relayPruneDropped(base, budget)
  while budget > 0 do
    local oldest = redis.call("ZRANGE", base .. ":cleanup", 0, 0)[1]
    if not oldest then
      return
    end
    budget = relayPruneNode(base, oldest, budget)
  end
end
