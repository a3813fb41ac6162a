--[[
  configure-subscription: changes the delivery settings of an attached subscription.
  KEYS[1]    the subscription's config (HASH)
  ARGV[1]    time override in microseconds, or '' (an update counts as use)
  ARGV[2..]  config field/value pairs (ackDeadlineUs, retentionUs, exactlyOnce)
  Returns    1 changed; -1 the subscription is not attached (deleted meanwhile)
  Invariant: settings of a dropped subscription are never re-created.
]]
local config_key = KEYS[1]
if redis.call('EXISTS', config_key) == 0 then return -1 end
redis.call('HSET', config_key, unpack(ARGV, 2))
mark_active(config_key, now_us(ARGV[1]))
return 1
