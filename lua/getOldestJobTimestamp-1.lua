--[[
  getOldestJobTimestamp-1: when the oldest job that is ready to run became ready,
  read only. The name and KEYS are those of the script BullMQ's pull request #4663
  proposes; ARGV and the answer's extra entries are ours (docs/protocol.md).

  KEYS[1]  key prefix ("bull:q:")

  ARGV[1]  now, ms: a delayed job counts once it is due at or before it (the same
           cut as the promotion in moveToActive); absent or not a number: no delayed
           job counts

  A job's ready time is its hash's timestamp + delay (delay is 0 for a job in wait
  or prioritized, save a legacy one), and for a job still in delayed its due time
  (score / 4096), right for a retry's backoff, whose hash delay is relative to the
  failure and not to the timestamp. Candidates, a bounded number of each:

  * wait: the 8 ids at each end. New jobs are LPUSHed, so the right end (where
    workers pop) holds the oldest FIFO job and the jobs sent back to the front
    (stalled, rate limited); LIFO jobs are RPUSHed, so in a list of LIFO jobs only the
    left end holds the oldest. Exact for a list of FIFO jobs or of LIFO jobs; in a list
    mixing both the oldest sits where they meet, inside, and the answer is a lower
    bound on its age.
  * prioritized: the head of each priority level in use (score priority * 2^32 +
    counter, so a level's head is its oldest), at most 32 levels from each end: the
    most urgent ones (they run next) and the least urgent (they starve). Exact with up
    to 64 levels in use; with more, the levels in the middle are not read and the
    answer is a lower bound. The first 4 members of a level are read, so a missing hash
    at its head is passed over.
  * delayed: the first 8 due jobs (ordered by due time).

  An id whose hash is missing or has no numeric timestamp is passed over (garbage), as
  is a legacy "0:" marker.

  Returns { ready ms (an integer) or nil, its job id or nil, where it is ("wait",
  "prioritized" or "delayed") or nil, 1 if meta has the paused field else 0 }; all
  nil but the last when no job is ready.
]]
local rcall = redis.call
local prefix = KEYS[1]
local now = tonumber(ARGV[1])

local PER_END = 8
local PER_LEVEL = 4
local LEVELS_EACH_END = 32
local LEVEL = 0x100000000

local bestTs, bestId, bestWhere

local function consider(ts, jobId, where)
  if bestTs == nil or ts < bestTs then
    bestTs, bestId, bestWhere = ts, jobId, where
  end
end

-- The ready time of a job in wait or prioritized, nil for garbage.
local function readyTime(jobId)
  if string.sub(jobId, 1, 2) == "0:" then
    return nil
  end
  local fields = rcall("HMGET", prefix .. jobId, "timestamp", "delay")
  local ts = tonumber(fields[1])
  if ts == nil then
    return nil
  end
  local delay = tonumber(fields[2])
  if delay ~= nil and delay > 0 then
    ts = ts + delay
  end
  return ts
end

local function considerList(ids)
  for _, jobId in ipairs(ids) do
    local ts = readyTime(jobId)
    if ts ~= nil then
      consider(ts, jobId, "wait")
    end
  end
end

local waitKey = prefix .. "wait"
local waiting = rcall("LLEN", waitKey)
if waiting > 0 then
  considerList(rcall("LRANGE", waitKey, -PER_END, -1))
  if waiting > PER_END then
    considerList(rcall("LRANGE", waitKey, 0, math.min(PER_END, waiting - PER_END) - 1))
  end
end

local prioritizedKey = prefix .. "prioritized"

-- The head of level `level` (its oldest job with a hash, among its first PER_LEVEL).
local function considerLevel(level)
  local found = rcall("ZRANGEBYSCORE", prioritizedKey, string.format("%.0f", level * LEVEL),
    "(" .. string.format("%.0f", (level + 1) * LEVEL), "LIMIT", 0, PER_LEVEL)
  for _, jobId in ipairs(found) do
    local ts = readyTime(jobId)
    if ts ~= nil then
      consider(ts, jobId, "prioritized")
      return
    end
  end
end

-- The levels in use, walked from both ends: the most urgent (run next) and the least
-- urgent (the ones that starve), at most LEVELS_EACH_END from each.
local function levelOf(found)
  return math.floor(tonumber(found[2]) / LEVEL)
end
local low, high
local from, to = "-inf", "+inf"
for _ = 1, LEVELS_EACH_END do
  local first = rcall("ZRANGEBYSCORE", prioritizedKey, from, to, "WITHSCORES", "LIMIT", 0, 1)
  if #first == 0 then
    break
  end
  low = levelOf(first)
  considerLevel(low)
  from = string.format("%.0f", (low + 1) * LEVEL)
end
for _ = 1, LEVELS_EACH_END do
  local last = rcall("ZREVRANGEBYSCORE", prioritizedKey, to, from, "WITHSCORES", "LIMIT", 0, 1)
  if #last == 0 then
    break
  end
  high = levelOf(last)
  considerLevel(high)
  to = "(" .. string.format("%.0f", high * LEVEL)
end

if now ~= nil then
  local delayedKey = prefix .. "delayed"
  local due = rcall("ZRANGEBYSCORE", delayedKey, "-inf", string.format("%.0f", (math.floor(now) + 1) * 0x1000 - 1),
    "WITHSCORES", "LIMIT", 0, PER_END)
  for i = 1, #due, 2 do
    if rcall("EXISTS", prefix .. due[i]) == 1 then
      consider(math.floor(tonumber(due[i + 1]) / 0x1000), due[i], "delayed")
      break
    end
  end
end

local paused = rcall("HEXISTS", prefix .. "meta", "paused")
if bestTs == nil then
  return { false, false, false, paused }
end
return { bestTs, bestId, bestWhere, paused }
