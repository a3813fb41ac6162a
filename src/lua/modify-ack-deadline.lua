--[[
  modify-ack-deadline: sets new deadlines for deliveries of one subscription; 0 seconds is a nack,
  which makes the message available again (at once, or after the subscription's retry backoff)
  and, for a keyed message of an ordered subscription, cascades to the later outstanding messages
  of its key. A release gives back leases that never reached a client (a pull nobody received,
  a stream's lease over its flow-control budget): as a nack, but no delivery attempt is counted
  and no backoff waited (the generation goes back; nobody holds that delivery's ack ID). A hold
  extends leases for an acknowledge-and-publish (src/broker/ack-and-publish.ts) all or nothing:
  only when every one of them is valid (not expired, on any subscription) and, on an ordered
  exactly-once subscription, would be acknowledged in order (acknowledge-ordered.lua).
  KEYS[1]    subscription config (HASH: exactlyOnce "1"|"0", minBackoffUs, maxBackoffUs,
             maxDeliveryAttempts)
  KEYS[2]    leases (ZSET "seq:gen" -> deadline in microseconds)
  KEYS[3]    ready list
  KEYS[4]    keyed ZSET (empty without ordering)
  KEYS[5]    keyed deliveries (HASH seq -> keyed delivery "gen|state|key", see split_keyed_delivery in prelude.lua; empty
             without ordering)
  KEYS[6]    key states (HASH key -> "q" | "q<seq>" | outstanding count, or minus it; see
             busy_count in prelude.lua; empty without ordering)
  KEYS[7]    delayed (ZSET ready-list entry -> when its retry backoff ends, µs)
  ARGV[1]    time override in microseconds, or ''
  ARGV[2]    new deadline in seconds from now (0..600)
  ARGV[3]    wake channel, published to with how many messages (keys) became available (or will
             be, after a backoff: long polls then look again when it ends)
  ARGV[4]    'release': a release (ARGV[2] is 0); 'hold': a hold (ARGV[2] > 0); else ''
  ARGV[5]    version of the caller's subscription record, or '' (see newer_settings in prelude.lua)
  ARGV[6..]  distinct deliveries as "seq:gen"
  Returns    {REPLY_NO_SUBSCRIPTION} when the subscription does not exist (or its settings come
             from a newer record than ARGV[5]), else one code per delivery:
             DELIVERY_APPLIED  deadline changed (or nacked)
             DELIVERY_GONE     no such lease: acknowledged, superseded, nacked before, or unknown
             DELIVERY_EXPIRED  the lease expired; on exactly-once subscriptions nothing changed, on
                               others the deadline was changed anyway (the message had not been
                               delivered again yet); on a hold, nothing changed
             DELIVERY_OUT_OF_ORDER  (a hold, ordered exactly-once) an earlier message of its key is
                               neither acknowledged nor held before it in the request
             A hold changes nothing unless every code is DELIVERY_APPLIED.
  Invariant: only the named generation's lease changes; a nack ends that lease, so its ack ID
             stops working. A nacked keyed message is delivered again before any later message of
             its key, and the later ones already handed out are delivered again after it, in order.
             A nacked message is not delivered again before its backoff ends (one due for its
             dead-letter topic waits none).
]]
local config_key, leased_key, ready_key = KEYS[1], KEYS[2], KEYS[3]
local keys = {
  keyed = KEYS[4], deliveries = KEYS[5], states = KEYS[6], leased = leased_key, ready = ready_key, delayed = KEYS[7],
}
local FIRST_DELIVERY = 6
local now = now_us(ARGV[1])
local seconds = tonumber(ARGV[2])
local releasing, holding = ARGV[4] == 'release', ARGV[4] == 'hold'
local config = redis.call('HMGET', config_key, 'exactlyOnce', 'minBackoffUs', 'maxBackoffUs', 'maxDeliveryAttempts')
if not config[1] or newer_settings(config_key, ARGV[5]) then return {REPLY_NO_SUBSCRIPTION} end
local exactly_once = config[1] == '1'
local policy = redelivery_policy(config[2], config[3], config[4])
mark_active(config_key, now)

-- Sets the deadline (µs, as text) of the leases named, up to 1000 of them in one ZADD.
local function set_deadlines(members, deadline)
  local pairs_of, count = {}, 0
  for _, member in ipairs(members) do
    pairs_of[count + 1], pairs_of[count + 2] = deadline, member
    count = count + 2
  end
  if count > 0 then redis.call('ZADD', leased_key, 'XX', unpack(pairs_of)) end
end

local results = {}
if seconds > 0 then
  local deadline = string.format('%.0f', now + seconds * 1000000)
  if holding then
    results = strict_lease_codes(keys, ARGV, FIRST_DELIVERY, now, exactly_once)
    for _, code in ipairs(results) do
      if code ~= DELIVERY_APPLIED then return results end
    end
    in_chunks(ARGV, FIRST_DELIVERY, function(members) set_deadlines(members, deadline) end)
    return results
  end
  -- New deadlines are read and written a chunk at a time: the deliveries are distinct, and each
  -- change touches only its own lease, so the deadlines read up front are what a one-by-one loop
  -- would read.
  in_chunks(ARGV, FIRST_DELIVERY, function(members)
    local deadlines = redis.call('ZMSCORE', leased_key, unpack(members))
    local changing, count = {}, 0
    for i, member in ipairs(members) do
      local status = lease_status(deadlines[i], now, exactly_once)
      if status == 'valid' or status == 'expired' then
        count = count + 1
        changing[count] = member
      end
      results[#results + 1] = RESULT[status]
    end
    set_deadlines(changing, deadline)
  end)
  return results
end
-- Nacks and releases, one by one: a keyed one revokes the later outstanding messages of its key.
-- How many messages (keys, on an ordered subscription) became available: the wake-up's count.
local woke = 0
for i = FIRST_DELIVERY, #ARGV do
  local member = ARGV[i]
  local status = lease_status(redis.call('ZSCORE', leased_key, member), now, exactly_once)
  if status == 'valid' or status == 'expired' then
    local seq, gen = split_entry(member)
    local info = redis.call('HGET', keys.deliveries, seq)
    if info then
      local _, _, key = split_keyed_delivery(info)
      if revoke_from(keys, key, seq, releasing and 'release' or 'nack', now, policy) then woke = woke + 1 end
    else
      redis.call('ZREM', leased_key, member)
      local wait = backoff_us(policy, attempts_of(gen))
      if releasing then
        redis.call('LPUSH', ready_key, gen > 1 and seq .. ':' .. (gen - 1) or seq)
      elseif wait > 0 then
        redis.call('ZADD', keys.delayed, now + wait, member)
      else
        redis.call('LPUSH', ready_key, member)
      end
      woke = woke + 1
    end
  end
  results[#results + 1] = RESULT[status]
end
if woke > 0 then redis.call('PUBLISH', ARGV[3], woke) end
return results
