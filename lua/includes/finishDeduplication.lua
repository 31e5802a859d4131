--- @include "includes/addBaseMarkerIfNeeded"
--- @include "includes/addDelayMarkerIfNeeded"
--- @include "includes/addJobWithPriority"
--- @include "includes/getDelayedScore"
--- @include "includes/getOrSetMaxEvents"
--- @include "includes/isQueuePausedOrMaxed"
-- Deduplication when a job that owns an id ("deid") finishes (moveToFinished).

-- Free de:<id> if its TTL has just run out, or if it has no TTL and still names this
-- job. A key with time left keeps deduplicating until it expires (throttle mode).
local function releaseDeduplicationKey(keyPrefix, dedupId, jobId)
  local dedupKey = keyPrefix .. "de:" .. dedupId
  local ttl = redis.call("PTTL", dedupKey)
  if ttl == 0 then
    redis.call("DEL", dedupKey)
  elseif ttl == -1 and redis.call("GET", dedupKey) == jobId then
    redis.call("DEL", dedupKey)
  end
end

-- keepLastIfActive: adds that arrived while the owner was active left their job in the
-- hash dn:<id> (fields name, data, opts JSON, optional jid, pk, pd, pdk, rjk). Create
-- that job now (it becomes the new owner of the id) and enqueue it like an add would:
-- delayed, prioritized or wait, with "added" and "delayed"/"waiting" events.
local function createPendingDeduplicatedJob(keyPrefix, dedupId, eventsKey, metaKey, activeKey,
                                            waitKey, markerKey, prioritizedKey, pcKey,
                                            delayedKey, now)
  local pendingKey = keyPrefix .. "dn:" .. dedupId
  if redis.call("EXISTS", pendingKey) == 0 then
    return
  end
  local stored = redis.call("HMGET", pendingKey, "name", "data", "opts", "jid", "pk", "pd",
                            "pdk", "rjk")
  -- the id counter moves on every add, also when a stored id is reused
  local counter = redis.call("INCR", keyPrefix .. "id")
  local newId = stored[4]
  if not newId or newId == "" then
    newId = tostring(counter)
  end
  local newKey = keyPrefix .. newId
  local jobOpts = cjson.decode(stored[3] or "{}")
  local dedup = jobOpts["de"]

  local dedupKey = keyPrefix .. "de:" .. dedupId
  local ttl = type(dedup) == "table" and tonumber(dedup["ttl"]) or nil
  if type(dedup) == "table" and dedup["keepLastIfActive"] then
    redis.call("SET", dedupKey, newId)
  elseif ttl and ttl > 0 then
    redis.call("SET", dedupKey, newId, "PX", ttl)
  else
    redis.call("SET", dedupKey, newId)
  end

  local delay = tonumber(jobOpts["delay"]) or 0
  local prio = tonumber(jobOpts["priority"]) or 0
  local fields = {"name", stored[1], "data", stored[2], "opts", cjson.encode(jobOpts),
                  "timestamp", now, "delay", delay, "priority", prio}
  if stored[5] and stored[6] then
    fields[#fields + 1] = "parentKey"
    fields[#fields + 1] = stored[5]
    fields[#fields + 1] = "parent"
    fields[#fields + 1] = stored[6]
  end
  if stored[8] then
    fields[#fields + 1] = "rjk"
    fields[#fields + 1] = stored[8]
  end
  if type(dedup) == "table" and dedup["id"] then
    fields[#fields + 1] = "deid"
    fields[#fields + 1] = dedup["id"]
  end
  redis.call("HSET", newKey, unpack(fields))
  redis.call("XADD", eventsKey, "*", "event", "added", "jobId", newId, "name", stored[1])

  local maxEvents = getOrSetMaxEvents(metaKey)
  if delay ~= 0 then
    local score, due = getDelayedScore(delayedKey, now, delay)
    redis.call("ZADD", delayedKey, score, newId)
    redis.call("XADD", eventsKey, "MAXLEN", "~", maxEvents, "*", "event", "delayed",
               "jobId", newId, "delay", due)
    addDelayMarkerIfNeeded(markerKey, delayedKey)
  else
    local held = isQueuePausedOrMaxed(metaKey, activeKey)
    if prio > 0 then
      addJobWithPriority(prioritizedKey, prio, newId, pcKey)
    elseif jobOpts["lifo"] then
      redis.call("RPUSH", waitKey, newId)
    else
      redis.call("LPUSH", waitKey, newId)
    end
    addBaseMarkerIfNeeded(markerKey, held)
    redis.call("XADD", eventsKey, "MAXLEN", "~", maxEvents, "*", "event", "waiting",
               "jobId", newId)
  end

  if stored[7] then
    redis.call("SADD", stored[7], newKey)
  end
  -- deleted last, so a failure above leaves the pending job in place
  redis.call("DEL", pendingKey)
end
