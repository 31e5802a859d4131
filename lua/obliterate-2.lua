--[[
  obliterate-2: delete a paused queue with all its jobs and keys, a batch per call.

  KEYS[1]  meta
  KEYS[2]  key prefix ("bull:q:")

  ARGV[1]  batch size: how many jobs (and schedulers) one call may delete
  ARGV[2]  "" (or absent) to refuse while jobs are active; anything else (Node sends "force")
           deletes active jobs and their locks too

  Returns -1 when the queue is not paused, -2 when jobs are active and ARGV[2] is "",
  1 when the batch is used up (call again), 0 when the queue is gone: the last call
  also deletes the queue's own keys (events, meta, id, marker, metrics, ...).
  Jobs go in this order: active, delayed, schedulers, completed, wait, legacy
  paused, prioritized, failed. No events are written. Parents in waiting-children are
  not taken, as Node's obliterate leaves them: one whose children were all in this
  queue goes with its last child, one still waiting for children in another queue
  stays (with its dependencies and the waiting-children set) until those children
  finish; a parent in another queue whose last pending child goes here is moved to
  its wait list without an event.
]]
--- @include "includes/purgeJobs"

local base = KEYS[2]
local budget = tonumber(ARGV[1]) or 1000
if budget <= 0 then
  budget = 1000
end

if redis.call("HEXISTS", KEYS[1], "paused") ~= 1 then
  return -1
end

local activeKey = base .. "active"
local force = ARGV[2] ~= nil and ARGV[2] ~= ""
if not force and redis.call("LLEN", activeKey) > 0 then
  return -2
end

local function purgeList(suffix)
  budget = budget - purgeListJobs(base .. suffix, base, budget, nil)
  return budget <= 0
end

local function purgeZSet(suffix)
  budget = budget - purgeZSetJobs(base .. suffix, base, budget, nil)
  return budget <= 0
end

local function purgeSchedulers()
  local repeatKey = base .. "repeat"
  local ids = redis.call("ZRANGE", repeatKey, 0, budget - 1)
  for _, id in ipairs(ids) do
    redis.call("DEL", repeatKey .. ":" .. id)
  end
  callInSlices("ZREM", repeatKey, ids)
  budget = budget - #ids
  return budget <= 0
end

if purgeList("active") then return 1 end
if purgeZSet("delayed") then return 1 end
if purgeSchedulers() then return 1 end
if purgeZSet("completed") then return 1 end
if purgeList("wait") then return 1 end
if purgeList("paused") then return 1 end
if purgeZSet("prioritized") then return 1 end
if purgeZSet("failed") then return 1 end

redis.call("DEL",
  base .. "events", base .. "delay", base .. "stalled-check", base .. "stalled",
  base .. "id", base .. "pc", base .. "marker", base .. "limiter", base .. "meta",
  base .. "metrics:completed", base .. "metrics:completed:data",
  base .. "metrics:failed", base .. "metrics:failed:data")
return 0
