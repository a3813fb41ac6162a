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
  KEYS[8]    prefix of the body block keys (see body_location in prelude.lua)
  KEYS[9]    holds (HASH block -> held flags; see mark_holds in prelude.lua)
  KEYS[10]   hold blocks (ZSET block -> block)
  ARGV[1]    time override in microseconds, or ''
  Returns    {REPLY_OK, unacked, leased, forwarding, oldestUs, nowUs}: oldestUs is the publish
             time of the oldest un-acked message (the first held one of the first hold block), ''
             for none; nowUs the script's clock
             {REPLY_NO_SUBSCRIPTION}  the subscription is not attached here
  Invariant: writes nothing. Every un-acked message is counted once: an unkeyed one is in exactly
             one of ready, delayed (a run entry for several), leased and forwarding; a keyed one is in the keyed set, and
             also in leased or forwarding while outstanding or forwarded (its key's count in key
             states says how many are), and a queued key has one marker in ready or delayed
             (SCHEMA.md, invariants 1 and 3). Its cost is a few O(1) commands, and on an ordered
             subscription one read of the key states: O(keys that have messages); the oldest
             message costs one search of a block's flags and one body read.
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

-- The oldest un-acked message: the first one held in the first block that holds any.
local oldest = ''
local first_block = redis.call('ZRANGE', KEYS[10], 0, 0)[1]
if first_block then
  local at = string.find(redis.call('HGET', KEYS[9], first_block) or '', '1', 1, true)
  local body = at and redis.call('HGET', body_location(KEYS[8], first_block .. string.format('%03d', at - 1)))
  if body then oldest = string.sub(body, 1, 16) end
end
return {REPLY_OK, entries - keyed_held, leased, forwarding, oldest, now_us(ARGV[1])}
