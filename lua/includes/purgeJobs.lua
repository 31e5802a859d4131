--- @include "includes/unlinkFromParent"
--- @include "includes/dropOwnedDedupKey"
--- @include "includes/removeJobKeys"

-- Bulk deletion for drain and obliterate: no events, no lock checks.
-- Each purged job is unlinked from its parent (a parent in the same queue whose
-- last child this was is purged too, one in another queue is released), frees its
-- deduplication id, and loses its hash, sub-keys and lock.

local function purgeJob(baseKey, jobId)
  local jobKey = baseKey .. jobId
  unlinkFromParent(jobKey, baseKey, true)
  dropOwnedDedupKey(baseKey, jobId, redis.call("HGET", jobKey, "deid"))
  removeJobKeys(jobKey)
  redis.call("DEL", jobKey .. ":lock")
end

-- Lua's unpack has a stack limit near 8000 values: commands that take many ids
-- get them in slices of this size.
local PURGE_SLICE = 7000

local function callInSlices(command, key, ids)
  for from = 1, #ids, PURGE_SLICE do
    local to = math.min(from + PURGE_SLICE - 1, #ids)
    redis.call(command, key, unpack(ids, from, to))
  end
end

-- Purge the first `max` ids of a list (max <= 0: the whole list), from the end that
-- LRANGE starts at. Ids in `spare` (a set: id -> true) stay, in their order.
-- Returns the number of ids purged.
local function purgeListJobs(listKey, baseKey, max, spare)
  local ids = redis.call("LRANGE", listKey, 0, max > 0 and max - 1 or -1)
  local kept = {}
  for _, id in ipairs(ids) do
    if spare and spare[id] then
      kept[#kept + 1] = id
    else
      purgeJob(baseKey, id)
    end
  end
  if max > 0 then
    redis.call("LTRIM", listKey, #ids, -1)
    local reversed = {}
    for i = #kept, 1, -1 do reversed[#reversed + 1] = kept[i] end
    callInSlices("LPUSH", listKey, reversed)
  else
    redis.call("DEL", listKey)
    callInSlices("RPUSH", listKey, kept)
  end
  return #ids - #kept
end

-- Purge the lowest-scored `max` members of a sorted set (max <= 0: all of them),
-- except those in `spare`. Returns the number purged.
local function purgeZSetJobs(zsetKey, baseKey, max, spare)
  local ids = redis.call("ZRANGE", zsetKey, 0, max > 0 and max - 1 or -1)
  local gone = {}
  for _, id in ipairs(ids) do
    if not (spare and spare[id]) then
      purgeJob(baseKey, id)
      gone[#gone + 1] = id
    end
  end
  callInSlices("ZREM", zsetKey, gone)
  return #gone
end
