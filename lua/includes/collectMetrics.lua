-- Per-minute throughput counts for metrics:completed / metrics:failed (only when the
-- worker asks for metrics, maxDataPoints = its maxDataPoints).
-- The hash keeps a running "count" plus the count and time of the last data point;
-- when a minute boundary has passed, the jobs counted since then are pushed to the
-- head of the data list, with a 0 for every further minute that passed (up to
-- maxDataPoints), and the list is trimmed to maxDataPoints.
local function collectMetrics(metricsKey, dataKey, maxDataPoints, now)
  local before = redis.call("HINCRBY", metricsKey, "count", 1) - 1
  local lastTs = redis.call("HGET", metricsKey, "prevTS")
  if not lastTs then
    redis.call("HSET", metricsKey, "prevTS", now, "prevCount", 0)
    return
  end
  local limit = tonumber(maxDataPoints)
  local minutes = math.floor(tonumber(now) / 60000) - math.floor(tonumber(lastTs) / 60000)
  if minutes > limit then
    minutes = limit
  end
  if minutes <= 0 then
    return
  end
  local points = {before - tonumber(redis.call("HGET", metricsKey, "prevCount") or 0)}
  for i = 2, minutes do
    points[i] = 0
  end
  for first = 1, #points, 7000 do
    redis.call("LPUSH", dataKey, unpack(points, first, math.min(first + 6999, #points)))
  end
  redis.call("LTRIM", dataKey, 0, limit - 1)
  redis.call("HSET", metricsKey, "prevCount", before, "prevTS", now)
end
