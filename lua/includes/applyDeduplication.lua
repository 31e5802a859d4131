--- @include "includes/addDelayMarkerIfNeeded"
--- @include "includes/getDelayedScore"
-- Deduplication on add (docs/protocol.md, "Adding jobs"), for options.de = {id, ttl?, extend?,
-- replace?, reschedule?, keepLastIfActive?}. The key de:<id> names the job that owns
-- the id; while it does, further adds with that id are dropped.
--
-- keepLastIfActive: the key never expires (ttl only selects the mode), and an add that
-- finds the owner active is not dropped but parked in dn:<id> (the latest such add
-- wins); moveToFinished creates it when the owner finishes (finishDeduplication).
--
-- pending describes the new job for parking: {name, data, opts (the unpacked map),
-- parentKey, parentJson, parentDepsKey, repeatJobKey}.
--
-- Returns nil when the new job goes ahead (it now owns the id), or the id of the
-- job that survives, in which case the caller stores nothing.

local function setDedupOwner(dedupKey, jobId, ttl)
  if ttl and ttl > 0 then
    redis.call("SET", dedupKey, jobId, "PX", ttl)
  else
    redis.call("SET", dedupKey, jobId)
  end
end

-- A key without expiry whose owner hash is gone (a crash between finishing the job
-- and clearing the key) would block the id forever: hand it to the new job.
local function takeOverStaleDedupKey(dedupKey, base, ownerId, jobId, dedupId, ttl)
  if redis.call("PTTL", dedupKey) == -1 and redis.call("EXISTS", base .. ownerId) == 0 then
    redis.call("DEL", base .. "dn:" .. dedupId)
    setDedupOwner(dedupKey, jobId, ttl)
    return true
  end
  return false
end

local function emitDeduplicated(eventsKey, maxEvents, survivorId, dedupId, droppedId)
  redis.call("XADD", eventsKey, "MAXLEN", "~", maxEvents, "*", "event", "deduplicated",
             "jobId", survivorId, "deduplicationId", dedupId, "deduplicatedJobId", droppedId)
end

-- keepLastIfActive with an active owner: park the new job in dn:<id> (replacing any
-- parked one), keep de:<id> from expiring, and say so with "deduplicated". True if parked.
local function parkIfOwnerActive(de, ownerId, base, dedupKey, dedupId, jobId, pending,
                                 eventsKey, maxEvents)
  if not de["keepLastIfActive"] or not ownerId then
    return false
  end
  local activeKey = base .. "active"
  local found = redis.pcall("LPOS", activeKey, ownerId)
  if type(found) == "table" and found.err then  -- no LPOS before Redis 6.0.6
    found = nil
    for _, id in ipairs(redis.call("LRANGE", activeKey, 0, -1)) do
      if id == ownerId then
        found = true
        break
      end
    end
  end
  if not found then
    return false
  end
  local parkedKey = base .. "dn:" .. dedupId
  local fields = {"name", pending.name, "data", pending.data, "opts", cjson.encode(pending.opts),
                  "jid", jobId}
  for _, pair in ipairs({{"pk", pending.parentKey}, {"pd", pending.parentJson},
                         {"pdk", pending.parentDepsKey}, {"rjk", pending.repeatJobKey}}) do
    if pair[2] then
      fields[#fields + 1] = pair[1]
      fields[#fields + 1] = pair[2]
    end
  end
  redis.call("DEL", parkedKey)
  redis.call("HSET", parkedKey, unpack(fields))
  redis.call("PERSIST", dedupKey)
  emitDeduplicated(eventsKey, maxEvents, ownerId, dedupId, jobId)
  return true
end

local function applyDeduplication(de, jobId, base, dedupKey, delayedKey, eventsKey,
                                  maxEvents, timestamp, delay, pending)
  if type(de) ~= "table" or not de["id"] then
    return nil
  end
  local dedupId = de["id"]
  dedupKey = dedupKey or (base .. "de:" .. dedupId)
  local ttl = tonumber(de["ttl"])
  local keepLast = de["keepLastIfActive"]
  -- the TTL the key is written with: none with keepLastIfActive
  local keyTtl = ttl
  if keepLast then
    keyTtl = nil
  end
  local ownerId

  if de["replace"] then
    ownerId = redis.call("GET", dedupKey)
    if not ownerId then
      setDedupOwner(dedupKey, jobId, keyTtl)
      return nil
    end
    if redis.call("ZREM", delayedKey, ownerId) > 0 then
      -- The owner has not started yet: the new job replaces it.
      local ownerKey = base .. ownerId
      redis.call("DEL", ownerKey, ownerKey .. ":logs", ownerKey .. ":dependencies",
                 ownerKey .. ":processed", ownerKey .. ":failed", ownerKey .. ":unsuccessful")
      redis.call("XADD", eventsKey, "*", "event", "removed", "jobId", ownerId, "prev", "delayed")
      emitDeduplicated(eventsKey, maxEvents, jobId, dedupId, ownerId)
      redis.call("DEL", base .. "dn:" .. dedupId)
      if keepLast then
        setDedupOwner(dedupKey, jobId, nil)
      elseif ttl and ttl > 0 and not de["extend"] then
        redis.call("SET", dedupKey, jobId, "KEEPTTL")
      else
        setDedupOwner(dedupKey, jobId, ttl)
      end
      return nil
    end
    if takeOverStaleDedupKey(dedupKey, base, ownerId, jobId, dedupId, keyTtl) then
      return nil
    end
    parkIfOwnerActive(de, ownerId, base, dedupKey, dedupId, jobId, pending, eventsKey, maxEvents)
    -- The owner already runs (or ran): the new job is dropped (or parked). BullMQ emits
    -- no other "deduplicated" event on this path, and neither do we.
    return ownerId
  elseif ttl and ttl > 0 and de["extend"] then
    ownerId = redis.call("GET", dedupKey)
    if not ownerId then
      setDedupOwner(dedupKey, jobId, keyTtl)
      return nil
    end
    if takeOverStaleDedupKey(dedupKey, base, ownerId, jobId, dedupId, keyTtl) then
      return nil
    end
    if parkIfOwnerActive(de, ownerId, base, dedupKey, dedupId, jobId, pending, eventsKey, maxEvents) then
      return ownerId
    end
    -- Every dropped add pushes the end of the window out again.
    setDedupOwner(dedupKey, ownerId, keyTtl)
  else
    local claimed
    if keyTtl and keyTtl > 0 then
      claimed = redis.call("SET", dedupKey, jobId, "PX", keyTtl, "NX")
    else
      claimed = redis.call("SET", dedupKey, jobId, "NX")
    end
    if claimed then
      return nil
    end
    ownerId = redis.call("GET", dedupKey)
    if not ownerId then
      setDedupOwner(dedupKey, jobId, keyTtl)
      return nil
    end
    if takeOverStaleDedupKey(dedupKey, base, ownerId, jobId, dedupId, keyTtl) then
      return nil
    end
    if parkIfOwnerActive(de, ownerId, base, dedupKey, dedupId, jobId, pending, eventsKey, maxEvents) then
      return ownerId
    end
  end

  emitDeduplicated(eventsKey, maxEvents, ownerId, dedupId, jobId)

  if de["reschedule"] and redis.call("ZSCORE", delayedKey, ownerId) then
    -- Push the waiting owner out to the new job's due time.
    local d = tonumber(delay) or 0
    redis.call("HSET", base .. ownerId, "delay", d)
    local score, due = getDelayedScore(delayedKey, timestamp, d)
    redis.call("ZADD", delayedKey, score, ownerId)
    redis.call("XADD", eventsKey, "MAXLEN", "~", maxEvents, "*", "event", "delayed",
               "jobId", ownerId, "delay", due)
    addDelayMarkerIfNeeded(base .. "marker", delayedKey)
  end
  return ownerId
end
