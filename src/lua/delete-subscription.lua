--[[
  delete-subscription: removes a subscription record and marks its data for clean-up.
  KEYS[1]    subscription records (HASH full name -> JSON)
  KEYS[2]    subscription name index (ZSET)
  KEYS[3]    the topic incarnation's subscription names (ZSET)
  KEYS[4]    pending data clean-ups (ZSET "topicUid/subscriptionUid" -> since, microseconds)
  ARGV[1]    time override in microseconds, or ''
  ARGV[2]    full subscription name
  ARGV[3]    the record the caller read (JSON)
  ARGV[4]    "topicUid/subscriptionUid"
  Returns    1 deleted; 0 gone or replaced meanwhile
  Invariant: the data of a deleted subscription is always either dropped or marked for clean-up.
]]
local subscriptions_key, index_key, topic_subscriptions_key, cleanups_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('HGET', subscriptions_key, ARGV[2]) ~= ARGV[3] then return 0 end
redis.call('HDEL', subscriptions_key, ARGV[2])
redis.call('ZREM', index_key, ARGV[2])
redis.call('ZREM', topic_subscriptions_key, ARGV[2])
redis.call('ZADD', cleanups_key, now_us(ARGV[1]), ARGV[4])
return 1
