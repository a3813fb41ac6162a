--[[
  attach-subscription: makes a subscription receive the topic's future publishes in this region,
  and sets its delivery settings. Used by create, update, and the copy to other regions:
  repeating it is harmless.
  KEYS[1]    topic state (HASH: block, used, attachVersion, deleted)
  KEYS[2]    attached subscriptions (HASH uid -> '1' ordered | '0', followed by the
             subscription's filter expression when it has one)
  KEYS[3]    the subscription's config (HASH)
  ARGV[1]    time override in microseconds, or '' (an attach or a settings change counts as use)
  ARGV[2]    subscription uid
  ARGV[3]    '1' if the subscription orders by key, else '0'; then its filter, if any
  ARGV[4]    version of the subscription record these settings come from
  ARGV[5..]  config field/value pairs (ackDeadlineUs, retentionUs, exactlyOnce, ordered,
             minBackoffUs, maxBackoffUs, maxDeliveryAttempts; '' for a policy not set)
  Returns    REPLY_OK attached; REPLY_TOPIC_DELETED the topic incarnation was deleted
  Invariant: attachVersion changes whenever the attached set changes, so a publish that read an
             older set is refused and retried (publish never misses an attached subscription);
             settings never go back to an older record version.
]]
local state_key, attached_key, config_key = KEYS[1], KEYS[2], KEYS[3]
if redis.call('HEXISTS', state_key, 'deleted') == 1 then return REPLY_TOPIC_DELETED end
local version = tonumber(ARGV[4])
local stored_version = tonumber(redis.call('HGET', config_key, 'version') or '-1')
local changed = false
if version > stored_version then
  redis.call('HSET', config_key, 'version', ARGV[4], unpack(ARGV, 5))
  changed = true
end
if redis.call('HGET', attached_key, ARGV[2]) ~= ARGV[3] then
  redis.call('HSET', attached_key, ARGV[2], ARGV[3])
  redis.call('HINCRBY', state_key, 'attachVersion', 1)
  changed = true
end
if changed then mark_active(config_key, now_us(ARGV[1])) end
return REPLY_OK
