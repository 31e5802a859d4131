--[[
  getDependencyCounts-4: how many children of a job are in each group.

  KEYS: 1 <job>:processed (hash), 2 <job>:dependencies (set, pending children),
        3 <job>:failed (hash, failures ignored or continued), 4 <job>:unsuccessful
        (sorted set, failures with failParentOnFailure)
  ARGV: the group names wanted, in order: "processed", "unprocessed", "ignored",
        "failed" (any other name counts as "failed", as BullMQ does)

  Returns one count per name.
]]
local counts = {}
for i = 1, #ARGV do
  local group = ARGV[i]
  if group == "processed" then
    counts[i] = redis.call("HLEN", KEYS[1])
  elseif group == "unprocessed" then
    counts[i] = redis.call("SCARD", KEYS[2])
  elseif group == "ignored" then
    counts[i] = redis.call("HLEN", KEYS[3])
  else
    counts[i] = redis.call("ZCARD", KEYS[4])
  end
end
return counts
