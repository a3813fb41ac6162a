--[[
  finish-forwarding: messages handed over to forward are stored in their dead-letter topic (step 3
  of forwarding, src/broker/dead-letters.ts): they leave the subscription, as an ack would take
  them. Repeating it is harmless.
  KEYS[1]    subscription config (its absence: the subscription is gone, and so are its messages)
  KEYS[2]    forwarding (ZSET "seq:gen" -> claim end)
  KEYS[3]    prefix of the body block keys (see body_location in prelude.lua)
  KEYS[4]    body reference counts
  KEYS[5]    ready list (a key whose forwarded message was its oldest goes back here)
  KEYS[6]    keyed ZSET
  KEYS[7]    keyed deliveries (HASH seq -> "gen|f|key" for a keyed message being forwarded)
  KEYS[8]    key states (a key whose message is being forwarded holds a positive count: 1)
  KEYS[9]    holds (HASH block -> held flags; see mark_holds in prelude.lua)
  KEYS[10]   hold blocks (ZSET block -> block)
  ARGV[1]    wake channel (published to when a key becomes deliverable again)
  ARGV[2..]  the forwarded messages, "seq:gen" as pull handed them over
  Returns    REPLY_OK, or REPLY_NO_SUBSCRIPTION
  Invariant: a message leaves the subscription only once: only what is still in the forwarding
             set is taken out of it, and its body reference released.
]]
local config_key, forwarding_key, bodies_prefix, refs_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local deliveries_key = KEYS[7]
local key_structures = { ready = KEYS[5], keyed = KEYS[6], states = KEYS[8] }
if redis.call('EXISTS', config_key) == 0 then return REPLY_NO_SUBSCRIPTION end

local released, woke = {}, false
for i = 2, #ARGV do
  local member = ARGV[i]
  if redis.call('ZREM', forwarding_key, member) == 1 then
    local seq = split_entry(member)
    released[#released + 1] = seq
    local info = redis.call('HGET', deliveries_key, seq)
    if info then
      local _, _, key = split_keyed_delivery(info)
      redis.call('ZREM', key_structures.keyed, keyed_member(key, seq))
      redis.call('HDEL', deliveries_key, seq)
      if redis.call('HINCRBY', key_structures.states, key, -1) <= 0 then
        if release_key(key_structures, key, false) then woke = true end
      end
    end
  end
end
if #released > 0 then
  release_bodies(bodies_prefix, refs_key, released)
  mark_holds({ flags = KEYS[9], blocks = KEYS[10] }, released, '0')
end
if woke then redis.call('PUBLISH', ARGV[1], '1') end
return REPLY_OK
