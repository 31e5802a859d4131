--[[
  removeChildDependency-1: a child that has not finished stops being one of its
  parent's pending children (Node's job.removeChildDependency()); the child itself
  stays where it is and forgets its parent.

  KEYS: 1 key prefix of the child's queue
  ARGV: 1 the child's job key, 2 the parent's job key

  If the child was pending in the parent, it leaves <parent>:dependencies and loses
  its "parentKey" and "parent" fields; when it was the last pending child of a parent
  in waiting-children, that parent is released as after a removal (see
  unlinkFromParent). Returns 0 when the link was removed, 1 when the parent did not
  list the child as pending (already finished, or another parent), -1 when the child
  does not exist, -5 when the parent does not exist.
]]
--- @include "includes/unlinkFromParent"

local jobKey = ARGV[1]
local parentKey = ARGV[2]

if redis.call("EXISTS", jobKey) ~= 1 then
  return -1
end
if redis.call("EXISTS", parentKey) ~= 1 then
  return -5
end
if unlinkFromParent(jobKey, KEYS[1], false, parentKey) then
  redis.call("HDEL", jobKey, "parentKey", "parent")
  return 0
end
return 1
