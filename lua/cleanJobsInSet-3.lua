--[[
  cleanJobsInSet-3: delete old jobs of one state (Node's queue.clean()).

  KEYS[1]  the state's set or list
  KEYS[2]  events
  KEYS[3]  repeat (the job schedulers ZSET)

  ARGV[1]  key prefix ("bull:q:")
  ARGV[2]  cutoff in ms: jobs whose time is at or before it are deleted
  ARGV[3]  most jobs to delete, 0 = no limit
  ARGV[4]  the state: wait, paused, active, delayed, prioritized, completed, failed
           (anything else is treated like a finished set)

  A job's time is finishedOn for completed/failed (their score), else the first of
  finishedOn, processedOn, timestamp that is set (delayed: processedOn, timestamp;
  prioritized: timestamp); a job with none is deleted. Active jobs holding a lock,
  and each job scheduler's upcoming job, are never deleted. With a limit, lists are
  only looked at from their running end (the oldest jobs), that many entries.
  Deleted jobs go as in drain: hash, sub-keys, deduplication id, parent link.
  Writes one "cleaned" event (count) and returns the deleted ids.
]]
--- @include "includes/purgeJobs"
--- @include "includes/isSchedulerCurrentJob"

local setKey = KEYS[1]
local repeatKey = KEYS[3]
local prefix = ARGV[1]
local cutoff = tonumber(ARGV[2])
local limit = tonumber(ARGV[3]) or 0
local state = ARGV[4]
local deleted = {}

local function jobTime(jobKey, fields)
  local values = redis.call("HMGET", jobKey, unpack(fields))
  for i = 1, #fields do
    if values[i] then
      return tonumber(values[i])
    end
  end
  return nil
end

local function oldEnough(jobKey, fields)
  local t = jobTime(jobKey, fields)
  return t == nil or t <= cutoff
end

local function room()
  return limit <= 0 or #deleted < limit
end

if state == "wait" or state == "paused" or state == "active" then
  local ids
  if limit > 0 then
    ids = redis.call("LRANGE", setKey, -limit, -1)
  else
    ids = redis.call("LRANGE", setKey, 0, -1)
  end
  local checkLock = state == "active"
  local first = -#ids  -- list index of ids[1], counted from the right end
  local hit = false
  for i, jobId in ipairs(ids) do
    if not room() then break end
    local jobKey = prefix .. jobId
    if not (checkLock and redis.call("EXISTS", jobKey .. ":lock") == 1)
        and not isSchedulerCurrentJob(jobId, jobKey, repeatKey)
        and oldEnough(jobKey, {"finishedOn", "processedOn", "timestamp"}) then
      -- Blank the entry by position now, drop all blanks in one LREM at the end.
      redis.call("LSET", setKey, first + i - 1, "")
      purgeJob(prefix, jobId)
      deleted[#deleted + 1] = jobId
      hit = true
    end
  end
  if hit then
    -- With a limit the blanks are all among the last `limit` entries: LREM counting from
    -- the tail stops there instead of walking the whole list (a million-job wait list).
    redis.call("LREM", setKey, limit > 0 and -#deleted or 0, "")
  end
elseif state == "delayed" or state == "prioritized" then
  local fields = state == "delayed" and {"processedOn", "timestamp"} or {"timestamp"}
  local ids
  if limit > 0 then
    ids = redis.call("ZRANGEBYSCORE", setKey, 0, "+inf", "LIMIT", 0, limit)
  else
    ids = redis.call("ZRANGEBYSCORE", setKey, 0, "+inf")
  end
  for _, jobId in ipairs(ids) do
    if not room() then break end
    local jobKey = prefix .. jobId
    if not isSchedulerCurrentJob(jobId, jobKey, repeatKey) and oldEnough(jobKey, fields) then
      purgeJob(prefix, jobId)
      deleted[#deleted + 1] = jobId
    end
  end
  callInSlices("ZREM", setKey, deleted)
else
  local ids
  if limit > 0 then
    ids = redis.call("ZRANGEBYSCORE", setKey, 0, cutoff, "LIMIT", 0, limit)
  else
    ids = redis.call("ZRANGEBYSCORE", setKey, 0, cutoff)
  end
  for _, jobId in ipairs(ids) do
    purgeJob(prefix, jobId)
    deleted[#deleted + 1] = jobId
  end
  callInSlices("ZREM", setKey, deleted)
end

redis.call("XADD", KEYS[2], "*", "event", "cleaned", "count", #deleted)
return deleted
