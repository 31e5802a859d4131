-- HSET a msgpack-packed flat array {field, value, field, value, ...} into a job hash.
-- An absent or empty array changes nothing.
local function updateJobFields(jobKey, packedFields)
  if packedFields and #packedFields > 0 then
    local fields = cmsgpack.unpack(packedFields)
    if fields and #fields > 0 then
      redis.call("HSET", jobKey, unpack(fields))
    end
  end
end
