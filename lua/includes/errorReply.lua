-- The error reply for what a failed pcall caught, as the call itself would have raised it:
-- a Redis error reply ({err = ...}) as it is, anything else (a Lua error) as its text.
local function errorReply(err)
  if type(err) == "table" and err["err"] then
    return err
  end
  return {err = tostring(err)}
end
