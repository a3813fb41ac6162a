--[[
  count-backlog: counts the unacknowledged messages of subscriptions of one topic incarnation,
  leased ones and those being forwarded to the dead-letter topic, from the sizes of their
  structures, and finds each one's oldest unacknowledged message, without changing anything (no
  lease, no activeAt).
  KEYS[1]    prefix of the body block keys (see body_location in prelude.lua)
  KEYS[2..]  per subscription, the prefix of its keys (keys.ts, subscriptionPrefix): the script
             reads the nine keys named by that prefix and ARGV[2..10], all with its hash tag
  ARGV[1]    time override in microseconds, or ''
  ARGV[2..]  the names of a subscription's keys it reads, in this order: config (HASH ordered,
             inRuns: how many more messages the run entries of delayed stand for than they are
             entries), ready list (LIST of "seq" | "seq:gen" | "k:<key>"), leases (ZSET "seq:gen"
             -> deadline, µs), delayed (ZSET "seq" | "<first>-<last>" | "seq:gen" | "k:<key>" ->
             when due, µs), forwarding (ZSET "seq:gen" -> claim end, µs), keyed ZSET (un-acked
             keyed messages), key states (HASH key -> "q" | "q<seq>" | outstanding count, or minus
             it; see busy_count in prelude.lua), holds (HASH block
             -> held flags; see mark_holds in prelude.lua) and hold blocks (ZSET block -> block)
  Returns    {REPLY_OK, nowUs, then per subscription: unacked, leased, forwarding, oldestUs}, where
             unacked is REPLY_NO_SUBSCRIPTION (negative) for a subscription not attached here, and
             oldestUs the publish time of its oldest un-acked message (the first held one of its
             first hold block), '' for none; nowUs is the script's clock
  Invariant: writes nothing. Every un-acked message is counted once: an unkeyed one is in exactly
             one of ready, delayed (a run entry for several), leased and forwarding; a keyed one is in the keyed set, and
             also in leased or forwarding while outstanding or forwarded (its key's count in key
             states says how many are), and a queued key has one marker in ready or delayed
             (SCHEMA.md, invariants 1 and 3). Its cost per subscription is a few O(1) commands, and
             on an ordered subscription one read of the key states: O(keys that have messages);
             the oldest message costs one search of a block's flags and one body read. A
             subscription is passed as one key, its prefix, rather than nine: at 10,000
             subscriptions a scrape of /metrics would otherwise send Redis 90,000 key names.
]]
local bodies_prefix = KEYS[1]
local KEY_NAMES = {unpack(ARGV, 2, 10)}

local function count(config_key, ready_key, leased_key, delayed_key, forwarding_key, keyed_key, states_key, holds_key, blocks_key)
  local config = redis.call('HMGET', config_key, 'ordered', 'inRuns')
  local ordered = config[1]
  if not ordered then return REPLY_NO_SUBSCRIPTION, 0, 0, '' end
  local leased, forwarding = redis.call('ZCARD', leased_key), redis.call('ZCARD', forwarding_key)
  local entries = redis.call('LLEN', ready_key) + redis.call('ZCARD', delayed_key) + (tonumber(config[2]) or 0)
  entries = entries + leased + forwarding
  -- Key markers, and keyed messages also counted in leased or forwarding, are no further messages.
  local keyed_held = 0
  if ordered == '1' then
    for _, state in ipairs(redis.call('HVALS', states_key)) do keyed_held = keyed_held + (busy_count(state) or 1) end
    entries = entries + redis.call('ZCARD', keyed_key)
  end
  -- The oldest un-acked message: the first one held in the first block that holds any (none
  -- without messages, by invariant 5).
  local unacked, oldest = entries - keyed_held, ''
  local first_block = unacked > 0 and redis.call('ZRANGE', blocks_key, 0, 0)[1]
  if first_block then
    local at = string.find(redis.call('HGET', holds_key, first_block) or '', '1', 1, true)
    local body = at and redis.call('HGET', body_location(bodies_prefix, first_block .. string.format('%03d', at - 1)))
    if body then oldest = string.sub(body, 1, 16) end
  end
  return unacked, leased, forwarding, oldest
end

local reply = {REPLY_OK, now_us(ARGV[1])}
local keys = {}
for i = 2, #KEYS do
  for n = 1, #KEY_NAMES do keys[n] = KEYS[i] .. KEY_NAMES[n] end
  local unacked, leased, forwarding, oldest = count(unpack(keys))
  reply[#reply + 1] = unacked
  reply[#reply + 1] = leased
  reply[#reply + 1] = forwarding
  reply[#reply + 1] = oldest
end
return reply
