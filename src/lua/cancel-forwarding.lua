--[[
  cancel-forwarding: messages handed over to forward cannot be (the subscription has no
  dead-letter policy any more, or its dead-letter topic does not exist): they are delivered again
  instead, at once, before newer work. Repeating it is harmless.
  KEYS[1]    subscription config (its absence: the subscription is gone, and so are its messages)
  KEYS[2]    forwarding (ZSET "seq:gen" -> claim end)
  KEYS[3]    ready list
  KEYS[4]    keyed ZSET
  KEYS[5]    keyed deliveries (HASH seq -> "gen|f|key" for a keyed message being forwarded)
  KEYS[6]    key states (a key whose message is being forwarded holds a positive count: 1)
  ARGV[1]    wake channel (published to when something became available)
  ARGV[2]    the end of the caller's claim on them, µs (pull.lua's claimEndUs)
  ARGV[3..]  the messages, "seq:gen" as pull handed them over
  Returns    REPLY_OK, or REPLY_NO_SUBSCRIPTION
  Invariant: a message goes back only from the forwarding set, and only under the caller's own
             claim: one that ran out and was taken over by a later pull (which may be storing it
             in the dead-letter topic) stays with that pull. It keeps its generation (so its
             delivery attempts go on counting); a keyed one goes back as its key's oldest.
]]
local config_key, forwarding_key, ready_key, deliveries_key = KEYS[1], KEYS[2], KEYS[3], KEYS[5]
local key_structures = { ready = ready_key, keyed = KEYS[4], states = KEYS[6] }
if redis.call('EXISTS', config_key) == 0 then return REPLY_NO_SUBSCRIPTION end
local claim_end = tonumber(ARGV[2])

local woke = false
for i = 3, #ARGV do
  local member = ARGV[i]
  if tonumber(redis.call('ZSCORE', forwarding_key, member)) == claim_end then
    redis.call('ZREM', forwarding_key, member)
    local seq = split_entry(member)
    local info = redis.call('HGET', deliveries_key, seq)
    if info then
      local gen, _, key, uncounted = split_keyed_delivery(info)
      redis.call('HSET', deliveries_key, seq, keyed_delivery(gen, 'w', key, uncounted))
      if redis.call('HINCRBY', key_structures.states, key, -1) <= 0 then
        if release_key(key_structures, key, true) then woke = true end
      end
    else
      redis.call('LPUSH', ready_key, member)
      woke = true
    end
  end
end
if woke then redis.call('PUBLISH', ARGV[1], '1') end
return REPLY_OK
