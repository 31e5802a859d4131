-- Take a full job key ("bull:q:42") apart: returns the job id (the text after the
-- last ':') and the key prefix of its queue ("bull:q:"), in that order.
local function splitJobKey(fullKey)
  local jobId = string.match(fullKey, "([^:]*)$")
  return jobId, string.sub(fullKey, 1, #fullKey - #jobId)
end
