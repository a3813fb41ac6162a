--[[
  attach-subscription: makes a new subscription receive the topic's future publishes.
  KEYS[1]    topic state (HASH: seq, attachVersion, deleted)
  KEYS[2]    attached subscriptions (HASH uid -> '1' ordered | '0')
  KEYS[3]    the subscription's config (HASH)
  ARGV[1]    time override in microseconds, or '' (the subscription is active from now)
  ARGV[2]    subscription uid
  ARGV[3]    '1' if the subscription orders by key, else '0'
  ARGV[4..]  config field/value pairs (ackDeadlineUs, retentionUs, exactlyOnce, ordered)
  Returns    1 attached; -1 the topic incarnation was deleted
  Invariant: attachVersion changes whenever the attached set changes, so a publish that read an
             older set is refused and retried (publish never misses an attached subscription).
]]
local state_key, attached_key, config_key = KEYS[1], KEYS[2], KEYS[3]
if redis.call('HEXISTS', state_key, 'deleted') == 1 then return -1 end
redis.call('HSET', config_key, unpack(ARGV, 4))
mark_active(config_key, now_us(ARGV[1]))
redis.call('HSET', attached_key, ARGV[2], ARGV[3])
redis.call('HINCRBY', state_key, 'attachVersion', 1)
return 1
