--[[
  finish-cleanup: forgets a clean-up mark once its data has been dropped.
  KEYS[1]    pending data clean-ups (ZSET)
  ARGV[1]    "topicUid/subscriptionUid/name"
  Returns    REPLY_OK
  Invariant: see put-data-owner.
]]
redis.call('ZREM', KEYS[1], ARGV[1])
return REPLY_OK
