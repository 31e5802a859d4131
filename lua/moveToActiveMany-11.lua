--[[
  moveToActiveMany-11: a worker with several free slots takes up to that many jobs in one
  call; each is taken exactly as its own moveToActive-11 call would take it, one after the
  other, and nothing else runs in between. BullMQ has no such script.

  KEYS  as moveToActive-11: 1 wait, 2 active, 3 prioritized, 4 events, 5 stalled,
        6 limiter, 7 delayed, 8 paused (unused), 9 meta, 10 pc, 11 marker
  ARGV  1 key prefix ("bull:q:"), 2 now (ms; empty: the server's clock, read here),
        3 msgpack {lockDuration, limiter?, name?} (as moveToActive-11's, without the token),
        4 token prefix, 5 number of the first token, 6 most jobs to take

  The i-th pick-up (from 0) locks its job with the token ARGV[4] .. (ARGV[5] + i), as a
  worker numbers its tokens.

  Returns the answers of the pick-ups made, in order, each what moveToActive-11 would have
  returned for it (with ready, its fifth element, after every job taken). It stops after
  the first pick-up that takes no job (its answer is the last one), after the pick-up that
  leaves nothing ready (ready 0: that pick-up removed the base marker and says when the
  next delayed job is due, as moveToActive-11's does), or after ARGV[6] pick-ups. A pick-up
  that raises an error stops it too: the answers end with that error ({err = ...}), after
  the jobs taken before it (and after the job of the pick-up whose ready count failed).
]]
--- @include "includes/pickUp"
--- @include "includes/errorReply"

local now = pickUpTime(ARGV[2])
local workerOpts = cmsgpack.unpack(ARGV[3])
local tokenPrefix = ARGV[4]
local first = tonumber(ARGV[5])
local most = tonumber(ARGV[6])
local answers = {}
-- the queue's meta fields a pick-up reads, read once: no pick-up writes them (when the read
-- fails, each pick-up reads them itself and ends the answers with the error)
local metaRead, metaFields = pcall(redis.call, "HMGET", KEYS[9], "paused", "concurrency", "max", "duration")
if not metaRead then
  metaFields = nil
end

for i = 0, most - 1 do
  workerOpts["token"] = tokenPrefix .. string.format("%d", first + i)
  local ok, fetched = pcall(fetchNextJob, KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7],
                            KEYS[9], KEYS[10], KEYS[11], ARGV[1], now, workerOpts, metaFields)
  if not ok then
    answers[#answers + 1] = errorReply(fetched)
    break
  end
  if not fetched then
    answers[#answers + 1] = {0, 0, 0, 0}
    break
  end
  answers[#answers + 1] = fetched
  if fetched[2] == 0 then
    break
  end
  -- the job is taken: an error from here on comes after its answer
  local counted, ready = pcall(noteReady, fetched, KEYS[1], KEYS[3], KEYS[11], KEYS[7])
  if not counted then
    answers[#answers + 1] = errorReply(ready)
    break
  end
  if ready == 0 then
    break
  end
end
return answers
