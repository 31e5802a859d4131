--- @include "includes/relayTime"
-- Every key of a namespace expires by itself once no node is alive (and no retained
-- message is left), whoever sweeps or not: the routing keys (nodes, started, subs,
-- cleanup) live until the latest lease ends, the message id counter and the layout
-- until the latest lease or retained message ends. Run after any change to the nodes
-- or to the retained messages.
local function relayRefreshNamespace(base, nodesKey, now)
  local leaseEnd = relayTopScore(nodesKey)
  local routing = {nodesKey, base .. ":started", base .. ":subs", base .. ":cleanup"}
  if leaseEnd > now then
    for _, key in ipairs(routing) do
      redis.call("PEXPIREAT", key, leaseEnd)
    end
  else
    -- no node alive: whatever subscriptions remain are dead nodes'
    redis.call("UNLINK", unpack(routing))
  end
  local keepEnd = math.max(leaseEnd, relayTopScore(base .. ":retained"))
  if keepEnd > now then
    redis.call("PEXPIREAT", base .. ":mid", keepEnd)
    redis.call("PEXPIREAT", base .. ":layout", keepEnd)
  else
    redis.call("UNLINK", base .. ":mid", base .. ":layout")
  end
end
