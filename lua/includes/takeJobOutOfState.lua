-- Remove a job id from whichever state set or list of its queue holds it.
-- Sorted sets are probed first (O(1) ZSCORE), lists last (one LREM each, assuming
-- an id is listed once). Returns the state it left: "completed", "waiting-children",
-- "delayed", "failed", "prioritized", "wait", "paused", "active", or "unknown".
local function takeJobOutOfState(prefix, jobId)
  local sets = {"completed", "waiting-children", "delayed", "failed", "prioritized"}
  for _, state in ipairs(sets) do
    if redis.call("ZREM", prefix .. state, jobId) == 1 then
      return state
    end
  end
  local lists = {"wait", "paused", "active"}
  for _, state in ipairs(lists) do
    if redis.call("LREM", prefix .. state, 1, jobId) == 1 then
      return state
    end
  end
  return "unknown"
end
