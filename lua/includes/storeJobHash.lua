-- Write a new job's hash (docs/protocol.md, "The job hash") and announce it with an "added" event.
-- opts is the unpacked options map (short keys); it is stored re-encoded by cjson.
-- Returns the job's delay and priority (0 when the options have none).
local function storeJobHash(jobKey, jobId, name, data, opts, timestamp, parentKey,
                            parentJson, repeatJobKey, eventsKey)
  local delay = opts["delay"] or 0
  local priority = opts["priority"] or 0
  local fields = {"name", name, "data", data, "opts", cjson.encode(opts),
                  "timestamp", timestamp, "delay", delay, "priority", priority}
  if parentKey ~= nil then
    fields[#fields + 1] = "parentKey"
    fields[#fields + 1] = parentKey
    fields[#fields + 1] = "parent"
    fields[#fields + 1] = parentJson
  end
  if repeatJobKey then
    fields[#fields + 1] = "rjk"
    fields[#fields + 1] = repeatJobKey
  end
  local dedup = opts["de"]
  if type(dedup) == "table" and dedup["id"] then
    fields[#fields + 1] = "deid"
    fields[#fields + 1] = dedup["id"]
  end
  redis.call("HMSET", jobKey, unpack(fields))
  redis.call("XADD", eventsKey, "*", "event", "added", "jobId", jobId, "name", name)
  return delay, priority
end
