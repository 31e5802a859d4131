--[[
  releaseParentIfNoPendingDependencies-2: the last step of a flow insert, once per
  parent the flow touched. While the nodes are added (with the defer flag), a child
  that already existed and was completed is only recorded in <parent>:processed; the
  parent cannot be released then because its other children may not be added yet.
  Here, in the same transaction after every node, a parent that ended up with no
  pending child leaves waiting-children (delayed, prioritized or wait, see
  releaseParentIfReady).

  KEYS: 1 parent job hash, 2 parent dependencies set
  ARGV: 1 parent queue key ("<prefix>:<queue>"), 2 parent id, 3 timestamp (ms)

  A parent marked "flowAttachmentFailed" (a child of this flow could not be attached
  because its custom id belongs to another parent) loses the mark and stays where it
  is. A parent that is gone or not in waiting-children is left alone. Returns nothing.
]]
--- @include "includes/releaseParentIfReady"

if redis.call("HGET", KEYS[1], "flowAttachmentFailed") then
  redis.call("HDEL", KEYS[1], "flowAttachmentFailed")
  return
end

if redis.call("SCARD", KEYS[2]) == 0 then
  moveParentToWaitIfWaiting(ARGV[1], KEYS[1], ARGV[2], ARGV[3])
end
