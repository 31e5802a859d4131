--- @include "includes/getOrSetMaxEvents"
--- @include "includes/handleExistingCustomId"
--- @include "includes/applyDeduplication"
-- The steps every add script takes before it stores anything (docs/protocol.md,
-- "Adding jobs"): parent check, the id counter (INCR'd on every add, whatever happens next),
-- the events cap, custom-id duplicates and deduplication.
--
-- a is the unpacked ARGV[1] array: {key prefix, custom id or "", name, timestamp,
-- parentKey, parent dependencies key, parent map, repeat job key, dedup key,
-- defer parent release}; opts the unpacked options map; data the job's JSON text
-- (kept only if a keepLastIfActive add is parked).
--
-- Returns finished, value, ...:
--   finished == true:  value is what the script returns as is (-5, -7, or the id of
--                      an existing or surviving job);
--   finished == false: value is the new job's id, then its key, the events cap and
--                      the parent JSON (nil without a parent).
local function resolveNewJobId(a, opts, idKey, metaKey, completedKey, delayedKey, eventsKey, data)
  local base = a[1]
  local parentKey = a[5]
  local parentJson
  if parentKey ~= nil then
    if redis.call("EXISTS", parentKey) ~= 1 then
      return true, -5
    end
    parentJson = cjson.encode(a[7])
  end

  local counter = redis.call("INCR", idKey)
  local maxEvents = getOrSetMaxEvents(metaKey)
  local timestamp = a[4]

  local jobId = a[2]
  if jobId == nil or jobId == "" then
    jobId = counter .. ""
  elseif redis.call("EXISTS", base .. jobId) == 1 then
    return true, handleExistingCustomId(base .. jobId, jobId, parentKey, a[7], parentJson,
                                        a[6], completedKey, eventsKey, maxEvents,
                                        timestamp, a[10])
  end

  local pending = {name = a[3], data = data, opts = opts, parentKey = parentKey,
                   parentJson = parentJson, parentDepsKey = a[6], repeatJobKey = a[8]}
  local survivor = applyDeduplication(opts["de"], jobId, base, a[9], delayedKey, eventsKey,
                                      maxEvents, timestamp, opts["delay"], pending)
  if survivor then
    return true, survivor
  end
  return false, jobId, base .. jobId, maxEvents, parentJson
end
