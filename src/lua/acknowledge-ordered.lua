--[[
  acknowledge-ordered: ends deliveries of a subscription with message ordering. On exactly-once
  subscriptions a keyed message is acknowledged only when it is its key's oldest un-acked one.
  KEYS[1]    subscription config (HASH: exactlyOnce "1"|"0")
  KEYS[2]    leases (ZSET "seq:gen" -> deadline in microseconds)
  KEYS[3]    message bodies
  KEYS[4]    body reference counts
  KEYS[5]    ready list (a key whose last outstanding message is acked goes back here)
  KEYS[6]    keyed ZSET
  KEYS[7]    keyed deliveries (HASH seq -> "gen|o|key" | "gen|w|key")
  KEYS[8]    key states (HASH key -> "q" | outstanding count)
  ARGV[1]    time override in microseconds, or ''
  ARGV[2]    wake channel (published to when a key becomes deliverable again)
  ARGV[3..]  deliveries as "seq:gen", applied in this order
  Returns    {-1} when the subscription does not exist, else one code per delivery:
             1 acknowledged; 0 no such lease; 2 lease expired (as in acknowledge);
             3 out of order: an earlier message of the same key is not acknowledged yet
               (exactly-once only; nothing changed)
  Invariant: as acknowledge; and a key with nothing outstanding and messages left is queued in
             the ready list exactly once.
]]
local config_key, leased_key, messages_key, refs_key, ready_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local keyed_key, deliveries_key, key_states_key = KEYS[6], KEYS[7], KEYS[8]
local now = now_us(ARGV[1])
local exactly_once = exactly_once_mode(config_key)
if exactly_once == nil then return {-1} end
mark_active(config_key, now)

-- On exactly-once subscriptions a keyed message may be acked only as its key's oldest un-acked one.
local function out_of_order(key, seq)
  local min, max = key_range(key)
  return redis.call('ZRANGEBYLEX', keyed_key, min, max, 'LIMIT', 0, 1)[1] ~= keyed_member(key, seq)
end

local results = {}
local woke = false
for i = 3, #ARGV do
  local member = ARGV[i]
  local status = lease_status(redis.call('ZSCORE', leased_key, member), now, exactly_once)
  local code = RESULT[status]
  if status == 'valid' or status == 'expired' then
    local seq = split_entry(member)
    local info = redis.call('HGET', deliveries_key, seq)
    local key = info and select(3, split_keyed_delivery(info))
    if key and exactly_once and out_of_order(key, seq) then
      code = 3
    else
      redis.call('ZREM', leased_key, member)
      release_body(messages_key, refs_key, seq)
      if key then
        redis.call('ZREM', keyed_key, keyed_member(key, seq))
        redis.call('HDEL', deliveries_key, seq)
        if redis.call('HINCRBY', key_states_key, key, -1) <= 0 then
          if release_key(keyed_key, key_states_key, ready_key, key, false) then woke = true end
        end
      end
    end
  end
  results[#results + 1] = code
end
if woke then redis.call('PUBLISH', ARGV[2], '1') end
return results
