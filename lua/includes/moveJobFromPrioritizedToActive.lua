-- Take the lowest-scored prioritized job and put it at the left end of active, the same
-- place RPOPLPUSH from wait lands a job. Returns its id, or nil when prioritized is empty;
-- then the priority counter is deleted too, so scores restart from a small counter.
local function moveJobFromPrioritizedToActive(prioritizedKey, activeKey, pcKey)
  local head = redis.call("ZPOPMIN", prioritizedKey)
  if #head == 0 then
    redis.call("DEL", pcKey)
    return nil
  end
  redis.call("LPUSH", activeKey, head[1])
  return head[1]
end
