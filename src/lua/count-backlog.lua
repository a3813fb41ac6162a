--[[
  count-backlog: counts a subscription's unacknowledged messages, leased ones and those being
  forwarded to the dead-letter topic, from the sizes of its structures, without changing
  anything (no lease, no activeAt).
  KEYS[1]    subscription config (HASH ordered, inRuns: how many more messages the run entries
             of delayed stand for than they are entries)
  KEYS[2]    ready list (LIST of "seq" | "seq:gen" | "k:<key>")
  KEYS[3]    leases (ZSET "seq:gen" -> deadline, µs)
  KEYS[4]    delayed (ZSET "seq" | "<first>-<last>" | "seq:gen" | "k:<key>" -> when due, µs)
  KEYS[5]    forwarding (ZSET "seq:gen" -> claim end, µs)
  KEYS[6]    keyed ZSET (un-acked keyed messages)
  KEYS[7]    key states (HASH key -> "q" | outstanding count)
  ARGV none
  Returns    {REPLY_OK, unacked, leased, forwarding}
             {REPLY_NO_SUBSCRIPTION}  the subscription is not attached here
  Invariant: writes nothing. Every un-acked message is counted once: an unkeyed one is in exactly
             one of ready, delayed (a run entry for several), leased and forwarding; a keyed one is in the keyed set, and
             also in leased or forwarding while outstanding or forwarded (its key's count in key
             states says how many are), and a queued key has one marker in ready or delayed
             (SCHEMA.md, invariants 1 and 3). Its cost is a few O(1) commands, and on an ordered
             subscription one read of the key states: O(keys that have messages).
]]
local config_key, ready_key, leased_key, delayed_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local forwarding_key, keyed_key, states_key = KEYS[5], KEYS[6], KEYS[7]
local config = redis.call('HMGET', config_key, 'ordered', 'inRuns')
local ordered = config[1]
if not ordered then return {REPLY_NO_SUBSCRIPTION} end
local leased, forwarding = redis.call('ZCARD', leased_key), redis.call('ZCARD', forwarding_key)
local entries = redis.call('LLEN', ready_key) + redis.call('ZCARD', delayed_key) + (tonumber(config[2]) or 0)
entries = entries + leased + forwarding
-- Key markers, and keyed messages also counted in leased or forwarding, are no further messages.
local keyed_held = 0
if ordered == '1' then
  for _, state in ipairs(redis.call('HVALS', states_key)) do keyed_held = keyed_held + (tonumber(state) or 1) end
  entries = entries + redis.call('ZCARD', keyed_key)
end
return {REPLY_OK, entries - keyed_held, leased, forwarding}
