--[[
  relayAckInbox-1: record how far a node has consumed its inbox.

  KEYS[1]  <base>:nodes
  ARGV     1 base key, 2 node id, 3 id of the last entry consumed

  Returns 1 (a node without a record is left alone).
]]
local record = ARGV[1] .. ":" .. ARGV[2] .. ":node"
if redis.call("EXISTS", record) == 1 then
  redis.call("HSET", record, "cursor", ARGV[3])
end
return 1
