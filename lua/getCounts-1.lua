--[[
  getCounts-1: how many jobs each state holds.

  KEYS[1]  key prefix ("bull:q:")

  ARGV     the state names (wait, paused, active, delayed, prioritized, completed,
           failed, waiting-children), optionally preceded by a number: a cutoff
           timestamp in ms, in which case "delayed" counts only jobs due before it.

  Returns one integer per state name, in order. "waiting" is read as "wait". A
  legacy "0:" marker at the head of wait (or of the legacy paused list) is not a
  job: it is not counted, and it is removed.
]]
local prefix = KEYS[1]
local cutoff = tonumber(ARGV[1])
local first = cutoff and 2 or 1
local counts = {}

local function listCount(key)
  local total = redis.call("LLEN", key)
  if total > 0 then
    local head = redis.call("LINDEX", key, -1)
    if string.sub(head, 1, 2) == "0:" then
      redis.call("RPOP", key)
      total = total - 1
    end
  end
  return total
end

for i = first, #ARGV do
  local state = ARGV[i]
  if state == "waiting" then
    state = "wait"
  end
  local key = prefix .. state
  local n
  if state == "wait" or state == "paused" then
    n = listCount(key)
  elseif state == "active" then
    n = redis.call("LLEN", key)
  elseif state == "delayed" and cutoff then
    -- A delayed score is due * 4096 + sequence, so everything below
    -- cutoff * 4096 is due strictly before the cutoff.
    n = redis.call("ZCOUNT", key, "-inf", "(" .. string.format("%.0f", cutoff * 0x1000))
  else
    n = redis.call("ZCARD", key)
  end
  counts[#counts + 1] = n
end
return counts
