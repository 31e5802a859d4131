-- When a job goes away, free its deduplication id (bull:q:de:<id>) if the job still
-- owns it, together with any stored "next job" for that id (bull:q:dn:<id>).
-- dedupId may be false/nil (the job had no "deid" field). Returns true when freed.
local function dropOwnedDedupKey(prefix, jobId, dedupId)
  if not dedupId or dedupId == "" then
    return false
  end
  local dedupKey = prefix .. "de:" .. dedupId
  if redis.call("GET", dedupKey) == jobId then
    redis.call("DEL", dedupKey, prefix .. "dn:" .. dedupId)
    return true
  end
  return false
end
