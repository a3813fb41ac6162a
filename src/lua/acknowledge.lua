--[[
  acknowledge: ends the given deliveries of one subscription for good.
  KEYS[1]    subscription config (HASH: exactlyOnce "1"|"0")
  KEYS[2]    leases (ZSET "seq:gen" -> deadline in microseconds)
  KEYS[3]    prefix of the body block keys (see body_location in prelude.lua)
  KEYS[4]    body reference counts
  KEYS[5]    holds (HASH block -> held flags; see mark_holds in prelude.lua)
  KEYS[6]    hold blocks (ZSET block -> block)
  ARGV[1]    time override in microseconds, or ''
  ARGV[2]    version of the caller's subscription record, or '' (see newer_settings in prelude.lua)
  ARGV[3..]  deliveries as "seq:gen"
  Returns    {REPLY_NO_SUBSCRIPTION} when the subscription does not exist (or its settings come
             from a newer record than ARGV[2]), else one code per delivery:
             DELIVERY_APPLIED  acknowledged now
             DELIVERY_GONE     no such lease: already acknowledged, superseded by a newer delivery,
                               or unknown
             DELIVERY_EXPIRED  the lease expired; on exactly-once subscriptions nothing changed (the
                               message will be delivered again), on others it was acknowledged anyway
  Invariant: an acknowledgement only ends the delivery (generation) it names, never a newer one;
             on exactly-once subscriptions only a lease still within its deadline is acknowledged.
]]
local config_key, leased_key, bodies_prefix, refs_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local holds = { flags = KEYS[5], blocks = KEYS[6] }
local now = now_us(ARGV[1])
local exactly_once = exactly_once_mode(config_key)
if exactly_once == nil or newer_settings(config_key, ARGV[2]) then return {REPLY_NO_SUBSCRIPTION} end
mark_active(config_key, now)

local results = {}
in_chunks(ARGV, 3, function(members)
  local deadlines = redis.call('ZMSCORE', leased_key, unpack(members))
  local ended, seqs = {}, {}
  for i, member in ipairs(members) do
    local status = lease_status(deadlines[i], now, exactly_once)
    if status == 'valid' or status == 'expired' then
      ended[#ended + 1] = member
      seqs[#seqs + 1] = entry_seq(member)
    end
    results[#results + 1] = RESULT[status]
  end
  if #ended > 0 then
    redis.call('ZREM', leased_key, unpack(ended))
    release_bodies(bodies_prefix, refs_key, seqs)
    mark_holds(holds, seqs, '0')
  end
end)
return results
