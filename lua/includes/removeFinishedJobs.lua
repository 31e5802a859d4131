--- @include "includes/moveParentToWait"
--- @include "includes/removeJobKeys"
-- Retention of the completed / failed sets (keepJobs of moveToFinished). Each deleted
-- job is detached from its parent and loses its hash and sub-keys.

-- Delete jobs that finished at or before now - maxAgeSec seconds, oldest last, at most
-- limit of them per call.
local function removeJobsByMaxAge(now, maxAgeSec, finishedKey, keyPrefix, limit)
  local cutoff = tonumber(now) - maxAgeSec * 1000
  local old = redis.call("ZREVRANGEBYSCORE", finishedKey, cutoff, "-inf", "LIMIT", 0, limit)
  if #old == 0 then
    return
  end
  for _, oldId in ipairs(old) do
    local oldKey = keyPrefix .. oldId
    detachFromParent(oldKey, nil)
    removeJobKeys(oldKey)
  end
  if #old < limit then
    redis.call("ZREMRANGEBYSCORE", finishedKey, "-inf", cutoff)
  else
    for first = 1, #old, 7000 do
      redis.call("ZREM", finishedKey, unpack(old, first, math.min(first + 6999, #old)))
    end
  end
end

-- Keep only the newest maxCount jobs of the set.
local function removeJobsByMaxCount(maxCount, finishedKey, keyPrefix)
  local surplus = redis.call("ZREVRANGE", finishedKey, maxCount, -1)
  for _, oldId in ipairs(surplus) do
    local oldKey = keyPrefix .. oldId
    detachFromParent(oldKey, nil)
    removeJobKeys(oldKey)
  end
  redis.call("ZREMRANGEBYRANK", finishedKey, 0, -(maxCount + 1))
end
