--[[
  relayDeleteRetained-1: delete the retained message of a topic (new subscribers no
  longer get it).

  KEYS[1]  <base>:nodes
  ARGV     1 base key, 2 topic

  Returns 1 deleted, 0 the topic had none, -1 bad topic.
]]
--- @include "includes/relayTopics"
--- @include "includes/relayNamespace"

local base, topic = ARGV[1], ARGV[2]
if not relayParse(topic, false) then
  return -1
end
local now = relayNow()
local index = base .. ":retained"
redis.call("ZREM", index, topic)
redis.call("ZREMRANGEBYSCORE", index, "-inf", now)
-- the deleted one may have been the last to expire: the index now lives as long as
-- the messages left
local last = relayTopScore(index)
if last > 0 then
  redis.call("PEXPIREAT", index, last)
end
local deleted = redis.call("DEL", base .. ":" .. topic .. ":ret")
relayRefreshNamespace(base, KEYS[1], now)
return deleted
