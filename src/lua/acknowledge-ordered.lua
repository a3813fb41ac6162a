--[[
  acknowledge-ordered: ends deliveries of a subscription with message ordering. On exactly-once
  subscriptions a keyed message is acknowledged only when it is its key's oldest un-acked one.
  KEYS[1]    subscription config (HASH: exactlyOnce "1"|"0")
  KEYS[2]    leases (ZSET "seq:gen" -> deadline in microseconds)
  KEYS[3]    prefix of the body block keys (see body_location in prelude.lua)
  KEYS[4]    body reference counts
  KEYS[5]    ready list (a key whose last outstanding message is acked goes back here)
  KEYS[6]    keyed ZSET
  KEYS[7]    keyed deliveries (HASH seq -> keyed delivery "gen|state|key", see split_keyed_delivery in prelude.lua)
  KEYS[8]    key states (HASH key -> "q" | "q<seq>" | outstanding count, "-<count>" when those
             are all of the key's messages; see busy_count in prelude.lua)
  KEYS[9]    holds (HASH block -> held flags; see mark_holds in prelude.lua)
  KEYS[10]   hold blocks (ZSET block -> block)
  ARGV[1]    time override in microseconds, or ''
  ARGV[2]    wake channel (published to when a key becomes deliverable again)
  ARGV[3]    version of the caller's subscription record, or '' (see newer_settings in prelude.lua)
  ARGV[4..]  distinct deliveries as "seq:gen", decided in this order
  Returns    {REPLY_NO_SUBSCRIPTION} when the subscription does not exist (or its settings come
             from a newer record than ARGV[3]), else one code per delivery:
             DELIVERY_APPLIED, DELIVERY_GONE, DELIVERY_EXPIRED as in acknowledge;
             DELIVERY_OUT_OF_ORDER  an earlier message of the same key is not acknowledged yet
                                    (exactly-once only; nothing changed)
  Invariant: as acknowledge; and a key with nothing outstanding and messages left is queued in
             the ready list exactly once.
]]
local config_key, leased_key, bodies_prefix, refs_key, ready_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local keyed_key, deliveries_key, key_states_key = KEYS[6], KEYS[7], KEYS[8]
local key_structures = { keyed = keyed_key, states = key_states_key, ready = ready_key }
local holds = { flags = KEYS[9], blocks = KEYS[10] }
local now = now_us(ARGV[1])
local exactly_once = exactly_once_mode(config_key)
if exactly_once == nil or newer_settings(config_key, ARGV[3]) then return {REPLY_NO_SUBSCRIPTION} end
mark_active(config_key, now)

-- Deliveries are decided in request order, as if one by one, but read and written in batches:
-- a request names distinct deliveries, and a live lease is the only one of its seq, so the
-- leases and keyed deliveries read up front are what a one-by-one loop would read. The one
-- read that depends on earlier acks of the same request is the exactly-once order check; it
-- walks the front of each key's range (only the front is ever acked there).
local results = {}
local woke = false
in_chunks(ARGV, 4, function(members)
  local deadlines = redis.call('ZMSCORE', leased_key, unpack(members))
  local ending, ending_seqs = {}, {}
  for i, member in ipairs(members) do
    local status = lease_status(deadlines[i], now, exactly_once)
    results[#results + 1] = RESULT[status]
    if status == 'valid' or status == 'expired' then
      ending[#ending + 1] = i
      ending_seqs[#ending_seqs + 1] = entry_seq(member)
    end
  end
  if #ending == 0 then return end
  local infos = redis.call('HMGET', deliveries_key, unpack(ending_seqs))

  -- Keys of the deliveries that may end (sole[j]: the key's only message, its state 'q<seq>'),
  -- and (exactly-once) the front of each key's range.
  local key_of, sole, wanted = {}, {}, {}
  for j = 1, #ending do
    if infos[j] then
      local _, state, key = split_keyed_delivery(infos[j])
      key_of[j], sole[j] = key, state == 's'
      if exactly_once then wanted[key] = (wanted[key] or 0) + 1 end
    end
  end
  local front, next_front = {}, {}
  if exactly_once then
    for key, count in pairs(wanted) do
      local min, max = key_range(key)
      front[key] = redis.call('ZRANGEBYLEX', keyed_key, min, max, 'LIMIT', 0, count)
      next_front[key] = 1
    end
  end

  local ended, ended_seqs, ended_keyed, ended_keyed_seqs = {}, {}, {}, {}
  local acked_per_key, last_ack_of_key = {}, {}
  local first_result = #results - #members
  for j, i in ipairs(ending) do
    local seq, key = ending_seqs[j], key_of[j]
    local member = key and keyed_member(key, seq)
    if key and exactly_once and front[key][next_front[key]] ~= member then
      results[first_result + i] = DELIVERY_OUT_OF_ORDER
    else
      ended[#ended + 1] = members[i]
      ended_seqs[#ended_seqs + 1] = seq
      if key then
        if exactly_once then next_front[key] = next_front[key] + 1 end
        ended_keyed[#ended_keyed + 1] = member
        ended_keyed_seqs[#ended_keyed_seqs + 1] = seq
        acked_per_key[key] = (acked_per_key[key] or 0) + 1
        last_ack_of_key[key] = j
      end
    end
  end
  if #ended == 0 then return end
  redis.call('ZREM', leased_key, unpack(ended))
  release_bodies(bodies_prefix, refs_key, ended_seqs)
  mark_holds(holds, ended_seqs, '0')
  if #ended_keyed == 0 then return end
  redis.call('ZREM', keyed_key, unpack(ended_keyed))
  redis.call('HDEL', deliveries_key, unpack(ended_keyed_seqs))
  -- A key with nothing outstanding any more goes back to the ready list, in the order in which
  -- its last outstanding message was acknowledged, unless its state says they were all it had:
  -- then it is idle, without a read of its range. A key's only message says so itself ('s'):
  -- its state is not read. The outstanding counts of the other keys are read and written at
  -- once.
  local keys, idle = {}, {}
  for j = 1, #ending do
    local key = key_of[j]
    if key and last_ack_of_key[key] == j then
      if sole[j] then idle[#idle + 1] = key else keys[#keys + 1] = key end
    end
  end
  local states = #keys > 0 and redis.call('HMGET', key_states_key, unpack(keys)) or {}
  local still_busy, freed = {}, {}
  for i, key in ipairs(keys) do
    -- A live lease keeps its key busy, so its state is a count (invariant 3 of SCHEMA.md); a
    -- queued key would have its marker already.
    local count, all = busy_count(states[i])
    local outstanding = (count or 0) - acked_per_key[key]
    if outstanding > 0 then
      still_busy[#still_busy + 1] = key
      still_busy[#still_busy + 1] = busy_state(outstanding, all)
    elseif all then
      idle[#idle + 1] = key
    elseif count or not states[i] then
      freed[#freed + 1] = key
    end
  end
  if #still_busy > 0 then redis.call('HSET', key_states_key, unpack(still_busy)) end
  if #idle > 0 then redis.call('HDEL', key_states_key, unpack(idle)) end
  if release_keys(key_structures, freed) then woke = true end
end)
if woke then redis.call('PUBLISH', ARGV[2], '1') end
return results
