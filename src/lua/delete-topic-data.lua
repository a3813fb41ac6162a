--[[
  delete-topic-data: closes a topic incarnation to publishing. Its subscriptions keep and
  deliver what they already hold.
  KEYS[1]    topic state (HASH: block, used, attachVersion, deleted)
  KEYS[2]    forward IDs of the messages dead-lettered into it (nothing is stored here any more)
  KEYS[3]    its remembered idempotency keys (HASH key -> seq)
  KEYS[4]    when each of them was stored (ZSET key -> µs)
  ARGV       none
  Returns    REPLY_OK
  Invariant: no publish or attach succeeds on the incarnation afterwards.
]]
redis.call('HSET', KEYS[1], 'deleted', '1')
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
return REPLY_OK
