--[[
  create-subscription: records a subscription whose data is already attached to its topic.
  KEYS[1]    subscription records (HASH full name -> JSON)
  KEYS[2]    subscription name index (ZSET)
  KEYS[3]    topic records (HASH full name -> JSON)
  KEYS[4]    the topic incarnation's subscription names (ZSET)
  KEYS[5]    pending data clean-ups (ZSET "topicUid/subscriptionUid" -> since, microseconds)
  ARGV[1]    full subscription name
  ARGV[2]    full topic name
  ARGV[3]    the topic record the caller attached to (JSON)
  ARGV[4]    the subscription record (JSON)
  ARGV[5]    "topicUid/subscriptionUid", marked for clean-up before the attach
  Returns    1 created; -1 the subscription exists; -2 the topic is gone or was replaced
  Invariant: a recorded subscription is attached; an attached one that never got recorded
             stays marked for clean-up (the caller drops it on failure, the janitor after a crash).
]]
local subscriptions_key, index_key, topics_key, topic_subscriptions_key, cleanups_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if redis.call('HEXISTS', subscriptions_key, ARGV[1]) == 1 then return -1 end
if redis.call('HGET', topics_key, ARGV[2]) ~= ARGV[3] then return -2 end
redis.call('HSET', subscriptions_key, ARGV[1], ARGV[4])
redis.call('ZADD', index_key, 0, ARGV[1])
redis.call('ZADD', topic_subscriptions_key, 0, ARGV[1])
redis.call('ZREM', cleanups_key, ARGV[5])
return 1
