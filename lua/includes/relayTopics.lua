-- Relay topics, patterns and ids (the grammar every relay script checks).
-- A topic is 1 to 16 dot-separated segments, 512 characters at most; a segment is
-- letters, digits and "_", ":", "%", "-" (anything else is percent-encoded by the
-- publisher). A pattern may also hold "*" (any one segment) and, as its last segment
-- only, ">" (one or more segments). Node and endpoint ids: [A-Za-z0-9_-], 1 to 64.

-- The segments of text split at every ".", empty ones included.
local function relaySegments(text)
  local parts = {}
  local from = 1
  local dot = string.find(text, ".", from, true)
  while dot do
    parts[#parts + 1] = string.sub(text, from, dot - 1)
    from = dot + 1
    dot = string.find(text, ".", from, true)
  end
  parts[#parts + 1] = string.sub(text, from)
  return parts
end

-- The segments of a valid topic (wildcards false) or pattern (true); nil when invalid.
local function relayParse(text, wildcards)
  if type(text) ~= "string" or text == "" or #text > 512 then
    return nil
  end
  local parts = relaySegments(text)
  if #parts > 16 then
    return nil
  end
  for i, part in ipairs(parts) do
    local wild = wildcards and (part == "*" or (part == ">" and i == #parts))
    if not wild and string.find(part, "^[%w_:%%%-]+$") == nil then
      return nil
    end
  end
  return parts
end

-- Does a parsed pattern match a parsed topic?
local function relayMatches(pattern, topic)
  for i, part in ipairs(pattern) do
    if part == ">" then
      return #topic >= i
    end
    local seg = topic[i]
    if seg == nil or (part ~= "*" and part ~= seg) then
      return false
    end
  end
  return #pattern == #topic
end

local function relayIsWild(parts)
  for _, part in ipairs(parts) do
    if part == "*" or part == ">" then
      return true
    end
  end
  return false
end

-- The bucket a wildcard pattern is indexed under: its first segment, or "*" when that
-- segment is itself a wildcard.
local function relayBucket(parts)
  local first = parts[1]
  if first == "*" or first == ">" then
    return "*"
  end
  return first
end

local function relayValidId(id)
  return type(id) == "string" and #id >= 1 and #id <= 64 and string.find(id, "^[%w_%-]+$") ~= nil
end
