--[[
  attach-subscription: makes a subscription receive the topic's future publishes in this region,
  and sets its delivery settings. Used by create, update, and the copy to other regions:
  repeating it is harmless.
  KEYS[1]    topic state (HASH: block, used, attachVersion, deleted)
  KEYS[2]    attached subscriptions (HASH uid -> '1' ordered | '0', followed by the
             subscription's filter expression when it has one)
  KEYS[3]    the subscription's config (HASH)
  KEYS[4]    the topic's retainers (HASH subscription uid -> retention, µs)
  ARGV[1]    time override in microseconds, or '' (an attach or a settings change counts as use)
  ARGV[2]    subscription uid
  ARGV[3]    '1' if the subscription orders by key, else '0'; then its filter, if any
  ARGV[4]    version of the subscription record these settings come from
  ARGV[5..]  config field/value pairs (ackDeadlineUs, retentionUs, exactlyOnce, ordered,
             minBackoffUs, maxBackoffUs, maxDeliveryAttempts, retainAcked; '' for a policy not
             set)
  Returns    REPLY_OK attached; REPLY_TOPIC_DELETED the topic incarnation was deleted
  Invariant: attachVersion changes whenever the attached set changes, so a publish that read an
             older set is refused and retried (publish never misses an attached subscription);
             settings never go back to an older record version. startSeq, set by the first
             attach, is below every seq the subscription takes from publishes; the topic's
             retainUs covers the retention of every subscription with retainAcked set.
]]
local state_key, attached_key, config_key, retainers_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
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
if redis.call('HEXISTS', config_key, 'startSeq') == 0 then
  -- Every later publish takes seqs from here on (see publish.lua): the subscription's messages
  -- start there, and a seek back reaches earlier ones only through the topic's own retention.
  local position = redis.call('HMGET', state_key, 'block', 'used')
  local start = tonumber(position[1] or '0') * SEQS_PER_BLOCK + tonumber(position[2] or SEQS_PER_BLOCK)
  redis.call('HSET', config_key, 'startSeq', string.format('%d', start))
end
local retention = redis.call('HMGET', config_key, 'retainAcked', 'retentionUs')
if retention[1] == '1' then
  redis.call('HSET', retainers_key, ARGV[2], retention[2])
else
  redis.call('HDEL', retainers_key, ARGV[2])
end
update_retention(state_key, retainers_key)
if changed then mark_active(config_key, now_us(ARGV[1])) end
return REPLY_OK
