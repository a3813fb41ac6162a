--[[
  delete-topic: removes a topic record. Its subscriptions stay (they show `_deleted-topic_`,
  derived from the topic uid they carry no longer being the live one).
  KEYS[1]    topic records (HASH full name -> JSON)
  KEYS[2]    topic name index (ZSET)
  KEYS[3]    the incarnation's subscription names (ZSET, for ListTopicSubscriptions)
  ARGV[1]    full topic name
  ARGV[2]    the record the caller read (JSON); the delete applies only to that incarnation
  Returns    1 deleted; 0 the topic is gone or was replaced meanwhile
  Invariant: a delete never removes a different incarnation than the one the caller saw.
]]
local topics_key, index_key, topic_subscriptions_key = KEYS[1], KEYS[2], KEYS[3]
if redis.call('HGET', topics_key, ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', topics_key, ARGV[1])
redis.call('ZREM', index_key, ARGV[1])
redis.call('DEL', topic_subscriptions_key)
return 1
