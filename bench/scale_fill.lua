--[[
  The scale bench's fill (bench/scale/tools.py): writes jobs straight into one state of a queue,
  in the shape an add (Node's addStandardJob/addDelayedJob) leaves them, so a backlog of a
  million jobs is there in seconds. Called in chunks; the fill is never timed.

  KEYS[1]  the state's key (wait list, or completed/failed/delayed/prioritized ZSET)
  KEYS[2]  the queue's id counter
  KEYS[3]  the marker (delayed: the delay marker is set; wait and prioritized: none, the
           bench pauses the queue first and its resume sets the marker)
  KEYS[4]  the priority counter (pc; prioritized only)
  ARGV[1]  key prefix ("bench:q:")
  ARGV[2]  first job id (a number)
  ARGV[3]  how many jobs
  ARGV[4]  the state: wait, completed, failed, delayed, prioritized
  ARGV[5]  timestamp (ms): the jobs' add time, and their finish time when finished
  ARGV[6]  delayed: the first job's due time (ms); prioritized: how many priorities (job i
           gets priority 1 + (i * 7919) mod that, so the ids are in no priority order)
  ARGV[7]  delayed only: ms between two jobs' due times (may be fractional)
  ARGV[8]  bytes of padding in each job's data ("pad": "xx..."; 0 or absent = none)

  A prioritized job is what addPrioritizedJob leaves: "priority" in the hash and the
  options, and in the prioritized ZSET with score priority * 2^32 + the next pc value.
]]
local stateKey = KEYS[1]
local prefix = ARGV[1]
local first = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local state = ARGV[4]
local ts = tonumber(ARGV[5])
local due0 = tonumber(ARGV[6] or "0") or 0
local step = tonumber(ARGV[7] or "0") or 0
local padBytes = tonumber(ARGV[8] or "0") or 0
local pad = ""
if padBytes > 0 then
  pad = ',"pad":"' .. string.rep("x", padBytes) .. '"'
end
local pc = 0
if state == "prioritized" then
  pc = redis.call("INCRBY", KEYS[4], n) - n
end

for i = first, first + n - 1 do
  local id = tostring(i)
  local key = prefix .. id
  if state == "delayed" then
    local due = math.floor(due0 + (i - first) * step)
    redis.call("HSET", key, "name", "j", "data", '{"t":' .. due .. ',"i":' .. i .. '}', "opts",
      '{"delay":' .. (due - ts) .. '}', "timestamp", ts, "delay", due - ts, "priority", 0)
    redis.call("ZADD", stateKey, due * 4096 + (i % 4096), id)
  elseif state == "prioritized" then
    local p = 1 + (i * 7919) % due0
    redis.call("HSET", key, "name", "j", "data", '{"i":' .. i .. ',"p":' .. p .. pad .. '}', "opts",
      '{"priority":' .. p .. '}', "timestamp", ts, "delay", 0, "priority", p)
    pc = pc + 1
    redis.call("ZADD", stateKey, p * 4294967296 + (pc % 4294967296), id)
  else
    redis.call("HSET", key, "name", "j", "data", '{"i":' .. i .. pad .. '}', "opts", "{}",
      "timestamp", ts, "delay", 0, "priority", 0)
    if state == "wait" then
      redis.call("LPUSH", stateKey, id)
    else
      redis.call("HSET", key, "processedOn", ts, "finishedOn", ts, "atm", 1, "ats", 1)
      if state == "failed" then
        redis.call("HSET", key, "failedReason", "boom", "stacktrace", "[]")
      else
        redis.call("HSET", key, "returnvalue", "null")
      end
      redis.call("ZADD", stateKey, ts, id)
    end
  end
end
redis.call("SET", KEYS[2], first + n - 1)
if state == "delayed" then
  local head = redis.call("ZRANGE", stateKey, 0, 0, "WITHSCORES")
  if head[2] then
    redis.call("ZADD", KEYS[3], math.floor(tonumber(head[2]) / 4096), "1")
  end
end
return n
