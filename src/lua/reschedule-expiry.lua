--[[
  reschedule-expiry: moves a subscription's or a snapshot's entry in its kind's expiry index to
  when it may expire at the earliest, as the expiration pass judged it (src/broker/control-plane.ts,
  expireDue), unless its record changed since the pass read it: the put of the change indexed it
  afresh.
  KEYS[1]    records of the kind (HASH full name -> JSON)
  KEYS[2]    the kind's expiry index (ZSET full name -> the earliest time it may expire, µs)
  ARGV[1]    full name
  ARGV[2]    the record as the pass read it (JSON; '' for none)
  ARGV[3]    when it may expire at the earliest (µs), or '' for never: the entry is removed
  Returns    REPLY_OK moved; REPLY_REFUSED the record changed meanwhile
  Invariant: an entry is never moved later than the expiry of the record it was judged by (see
             put-data-owner.lua: every put indexes its record from the time of the put).
]]
local records_key, index_key = KEYS[1], KEYS[2]
local name, judged, due = ARGV[1], ARGV[2], ARGV[3]
if (redis.call('HGET', records_key, name) or '') ~= judged then return REPLY_REFUSED end
if due == '' then
  redis.call('ZREM', index_key, name)
else
  redis.call('ZADD', index_key, due, name)
end
return REPLY_OK
