-- The next run of an "every" scheduler (all times in ms). Without a previous run it is
-- startDate (never in the past), or the next slot now aligned on "every" plus the offset
-- when an offset is set, or now. After a previous run it is that run plus "every"; if that
-- is already past, the schedule skips the missed slots and takes the next aligned one.
-- Returns the next run and the offset within the "every" grid (computed from the run
-- when no non-zero offset was given), both whole numbers.
local function everyNextMillis(prevMillis, every, now, offset, startDate)
  offset = tonumber(offset)
  local nextMillis
  if not prevMillis then
    if startDate then
      nextMillis = math.max(tonumber(startDate), now)
    elseif offset and offset > 0 then
      nextMillis = math.floor(now / every) * every + offset
      if nextMillis <= now then
        nextMillis = nextMillis + every
      end
    else
      nextMillis = now
    end
  else
    nextMillis = prevMillis + every
    if nextMillis < now then
      local aligned = math.floor(now / every) * every + (offset or 0)
      if aligned <= now then
        aligned = aligned + every
      end
      nextMillis = aligned
    end
  end
  if not offset or offset == 0 then
    offset = nextMillis - math.floor(nextMillis / every) * every
  end
  return math.floor(nextMillis), math.floor(offset)
end
