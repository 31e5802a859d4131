--[[
  relayReadInbox-1: read the next batch of a node's inbox and, in the same call, record
  the batch as fetched ("inFlight"), so that a publish trimming the inbox meanwhile does
  not count its entries as dropped. The position given is recorded as consumed.

  KEYS[1]  <base>:nodes
  ARGV     1 base key, 2 node id, 3 position (id of the last entry consumed, "0-0" at
           first), 4 most entries

  Returns what XREAD answers (nil when nothing is new), or nil when the node has no
  record (its lease ended).
]]
local record = ARGV[1] .. ":" .. ARGV[2] .. ":node"
if redis.call("EXISTS", record) == 0 then
  return nil
end
local read = redis.call("XREAD", "COUNT", ARGV[4], "STREAMS", ARGV[1] .. ":" .. ARGV[2] .. ":inbox", ARGV[3])
local fetched = ARGV[3]
if read then
  local entries = read[1][2]
  fetched = entries[#entries][1]
end
redis.call("HSET", record, "cursor", ARGV[3], "inFlight", fetched)
return read
