--[[
  paginate-1: one page of a set or a hash (a parent's pending children in
  <job>:dependencies, or its results in <job>:processed), walked with SSCAN/HSCAN.
  Sets and hashes have no order, so a page is "the elements from position start to
  end in scan order"; elements added or removed between calls may be seen twice or
  not at all.

  KEYS: 1 the set or hash
  ARGV: 1 page start (0-based), 2 page end (inclusive; -1 = to the last element),
        3 scan cursor to resume from ("0" the first time), 4 how many elements the
        scans before that cursor passed, 5 most scans (of about 100 elements) this
        call may do, 6 optional: present = also return each element's job hash (the
        element, or for a hash the field, is a full job key)

  Returns {cursor, elements passed, items, total, jobs}: the cursor to resume from
  ("0" when the scan is complete), the count to send back as ARGV[4], the items of
  the page (set members, or {field, value} pairs for a hash), the number of elements
  in the key, and the flat HGETALL of each item's job (empty without ARGV[6]).
  A missing key gives {0, 0, {}, 0}; another type is an error.
]]
local key = KEYS[1]
local kind = redis.call("TYPE", key)["ok"]
local scan, count, step
if kind == "none" then
  return {0, 0, {}, 0}
elseif kind == "set" then
  scan, count, step = "SSCAN", "SCARD", 1
elseif kind == "hash" then
  scan, count, step = "HSCAN", "HLEN", 2
else
  return redis.error_reply("Pagination is only supported for sets and hashes.")
end

local total = redis.call(count, key)
local first = tonumber(ARGV[1])
local last = tonumber(ARGV[2])
if last == -1 then
  last = total
end
local stop = last + 1 -- the first position after the page
local cursor = ARGV[3]
local passed = tonumber(ARGV[4])
local maxScans = tonumber(ARGV[5])
local withJobs = ARGV[6] ~= nil

local items, jobs = {}, {}

local function page()
  local scans = 0
  repeat
    local reply = redis.call(scan, key, cursor, "COUNT", 100)
    cursor = reply[1]
    local chunk = reply[2]
    local n = #chunk / step
    if n == 0 then
      return
    end
    if passed + n < first then
      passed = passed + n -- this whole chunk lies before the page
    elseif passed > stop then
      return
    else
      for i = 1, #chunk, step do
        if passed >= stop then
          return
        end
        if passed >= first then
          if withJobs then
            jobs[#jobs + 1] = redis.call("HGETALL", chunk[i])
          end
          if step == 2 then
            items[#items + 1] = {chunk[i], chunk[i + 1]}
          else
            items[#items + 1] = chunk[i]
          end
        end
        passed = passed + 1
      end
    end
    scans = scans + 1
  until cursor == "0" or scans >= maxScans
end

page()
return {cursor, passed, items, total, jobs}
