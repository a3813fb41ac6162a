--[[
  mark-cleanup: marks subscription data for clean-up before it is attached, so that a crash
  between attaching and recording the subscription leaves nothing behind for good.
  KEYS[1]    pending data clean-ups (ZSET "topicUid/subscriptionUid/name" -> since, microseconds)
  ARGV[1]    time override in microseconds, or ''
  ARGV[2]    "topicUid/subscriptionUid/name"
  Returns    REPLY_OK
  Invariant: see put-data-owner.
]]
redis.call('ZADD', KEYS[1], now_us(ARGV[1]), ARGV[2])
return REPLY_OK
