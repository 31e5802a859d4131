--[[
  cancelJob-9: stop a job from anywhere (a queue, a command, a dashboard).

  KEYS  1 active, 2 wait, 3 paused (legacy list), 4 delayed, 5 completed, 6 failed,
        7 waiting-children, 8 prioritized, 9 the queue's cancellation channel
        (the KEYS are those of BullMQ's cancelJob-9 draft)
  ARGV  1 jobId, 2 reason (text, "" for none), 3 key prefix, 4 now (ms)

  By the job's state, first match wins:
    * completed or failed: nothing is written.                    -> {"finished", state}
    * active: the job hash gets the mark "cancelled" = reason and a deferred failure
      "defa" = "job cancelled[: reason]" (so any worker that picks it up again, Node's
      too, fails it without running it), and the JSON {"jobId", "reason", "queue"}
      ("queue" = the key prefix) is PUBLISHed on the channel: the worker running it
      stops it and fails it for good.                              -> {"accepted", "active"}
    * delayed, prioritized, waiting, waiting-children (or a legacy paused list): the job
      fails at once, as moveToFinished-14 fails an active job (same include): failedReason
      "job cancelled[: reason]", attempts made + 1, removeOnFail of the job's options,
      the parent told (fpof / idof / rdof / cpof), events "failed" (prev = the state it
      left) and "retries-exhausted"; it never runs.                -> {"cancelled", state}
    * a job hash in no state list (being written by another script's caller): nothing.
                                                                   -> {"unknown", "unknown"}
    * no job hash: nothing.                                        -> {"missing", "unknown"}
  Calling it again is harmless: an active job is marked and signalled again, a failed
  one is left alone.
]]
--- @include "includes/finishActiveJob"

local jobId = ARGV[1]
local reason = ARGV[2]
local prefix = ARGV[3]
local now = ARGV[4]
local jobKey = prefix .. jobId

if redis.call("ZSCORE", KEYS[5], jobId) then
  return {"finished", "completed"}
end
if redis.call("ZSCORE", KEYS[6], jobId) then
  return {"finished", "failed"}
end
if redis.call("EXISTS", jobKey) == 0 then
  return {"missing", "unknown"}
end

local message = "job cancelled"
if reason ~= "" then
  message = message .. ": " .. reason
end

local function listed(listKey)
  for _, entry in ipairs(redis.call("LRANGE", listKey, 0, -1)) do
    if entry == jobId then
      return true
    end
  end
  return false
end

if listed(KEYS[1]) then
  redis.call("HSET", jobKey, "cancelled", reason, "defa", message)
  redis.call("PUBLISH", KEYS[9], cjson.encode({jobId = jobId, reason = reason, queue = prefix}))
  return {"accepted", "active"}
end

-- where it waits: taken out of it (an id sits in one state at a time)
local state
if redis.call("ZREM", KEYS[4], jobId) == 1 then
  state = "delayed"
elseif redis.call("ZREM", KEYS[8], jobId) == 1 then
  state = "prioritized"
elseif redis.call("ZREM", KEYS[7], jobId) == 1 then
  state = "waiting-children"
elseif redis.call("LREM", KEYS[2], 0, jobId) > 0 then
  state = "waiting"
elseif redis.call("LREM", KEYS[3], 0, jobId) > 0 then
  state = "waiting"
else
  return {"unknown", "unknown"}
end

-- the job's own options: removeOnFail and attempts (a foreign producer's JSON may be anything)
local keepJobs = {count = -1}
local attempts = 0
local ok, opts = pcall(cjson.decode, redis.call("HGET", jobKey, "opts") or "{}")
if ok and type(opts) == "table" then
  local rof = opts["removeOnFail"]
  if rof == true then
    keepJobs = {count = 0}
  elseif type(rof) == "number" then
    keepJobs = {count = rof}
  elseif type(rof) == "table" then
    keepJobs = {count = tonumber(rof["count"]), age = tonumber(rof["age"]), limit = tonumber(rof["limit"])}
  end
  attempts = tonumber(opts["attempts"]) or 0
end

-- failed as an active job fails, with no lock to check (token "0") and nothing fetched
redis.call("LPUSH", KEYS[1], jobId)
local packedOpts = cmsgpack.pack({token = "0", keepJobs = keepJobs, attempts = attempts, maxMetricsSize = ""})
finishActiveJob(KEYS[2], KEYS[1], KEYS[8], prefix .. "events", prefix .. "stalled", prefix .. "limiter",
                KEYS[4], prefix .. "meta", prefix .. "pc", KEYS[6], jobKey, prefix .. "metrics:failed",
                prefix .. "marker", jobId, now, "failedReason", message, "failed", "0", prefix,
                packedOpts, nil, state)
return {"cancelled", state}
