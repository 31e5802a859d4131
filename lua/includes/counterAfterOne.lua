-- The value a counter field of a job hash (atm, ats) takes when one is added, computed from
-- the value the caller already read with the job's other fields, so that it goes into the
-- caller's own HSET instead of a HINCRBY of its own. Only an absent field or a plain integer
-- of up to 12 digits is counted here (its sum prints the same from Lua's tostring and as a
-- command argument); anything else returns nil, and the caller uses incrementJobCounter,
-- which takes Redis' own reading of the value and handles garbage.
-- Returns the count and the same as text (what the caller writes: Redis 6.2 would format
-- a Lua number argument with "%.17g").
local function counterAfterOne(old)
  if not old then
    return 1, "1"
  end
  if #old <= 12 and (old == "0" or string.find(old, "^%-?[1-9]%d*$")) then
    local count = tonumber(old) + 1
    return count, string.format("%d", count)
  end
  return nil
end
