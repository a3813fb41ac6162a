--[[
  touch-subscription: records that a subscription is in use without changing anything else (an
  open streaming pull keeps its subscription alive even while no message flows).
  KEYS[1]    the subscription's config (HASH)
  ARGV[1]    time override in microseconds, or ''
  Returns    REPLY_OK touched; REPLY_NO_SUBSCRIPTION the subscription is not attached
  Invariant: a dropped subscription's config is never re-created.
]]
local config_key = KEYS[1]
if redis.call('EXISTS', config_key) == 0 then return REPLY_NO_SUBSCRIPTION end
mark_active(config_key, now_us(ARGV[1]))
return REPLY_OK
