--[[
  relayTrimInbox-1: remove the consumed entries of a node's inbox (up to the position
  given) and the oldest beyond its max length, and record on the node how many unread
  entries are left ("backlog") and how many unread ones were lost ("dropped"). Entries
  of a fetched batch ("inFlight") are being delivered: trimming them drops nothing.

  KEYS[1]  <base>:nodes
  ARGV     1 base key, 2 node id, 3 position (id of the last entry consumed, "0-0" if
           none), 4 max length

  Returns the number of entries left: the messages the node has not read yet.
]]
local record = ARGV[1] .. ":" .. ARGV[2] .. ":node"
local inbox = ARGV[1] .. ":" .. ARGV[2] .. ":inbox"
local position = ARGV[3]
local live = redis.call("EXISTS", record) == 1
if live then
  redis.call("HSET", record, "cursor", position)
end
if position ~= "0-0" and position ~= "0" then
  -- 10000 at most per call; the next call takes the rest
  local consumed = redis.call("XRANGE", inbox, "-", position, "COUNT", 10000)
  local ids = {}
  for i, entry in ipairs(consumed) do
    ids[i] = entry[1]
  end
  for from = 1, #ids, 5000 do
    redis.call("XDEL", inbox, unpack(ids, from, math.min(from + 4999, #ids)))
  end
end
local maxLen = tonumber(ARGV[4])
local lost = 0
local excess = redis.call("XLEN", inbox) - maxLen
if excess > 0 then
  local fetched = redis.call("HGET", record, "inFlight") or position
  local delivered = 0
  if fetched ~= "0-0" and fetched ~= "0" then
    delivered = #redis.call("XRANGE", inbox, "-", fetched, "COUNT", excess)
  end
  lost = redis.call("XTRIM", inbox, "MAXLEN", maxLen) - delivered
end
local backlog = redis.call("XLEN", inbox)
if live then  -- writing to a missing record would create one that never expires
  redis.call("HSET", record, "backlog", backlog)
  if lost > 0 then
    redis.call("HINCRBY", record, "dropped", lost)
  end
end
return backlog
