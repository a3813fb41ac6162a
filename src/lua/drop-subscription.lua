--[[
  drop-subscription: detaches a subscription and releases, in bounded batches, the message
  bodies it still holds. Called repeatedly until it returns 0; safe to repeat after a crash.
  KEYS[1]    topic state (HASH: seq, attachVersion, deleted)
  KEYS[2]    attached subscriptions (SET of subscription uids)
  KEYS[3]    the subscription's config (HASH)
  KEYS[4]    its ready list
  KEYS[5]    its leases
  KEYS[6]    message bodies
  KEYS[7]    body reference counts
  ARGV[1]    subscription uid
  ARGV[2]    how many entries to release in this call
  Returns    the number of entries still held (0 = fully dropped)
  Invariant: after the first call the subscription receives nothing new; every body reference
             it held is released exactly once (entries are popped as they are released).
]]
local state_key, attached_key, config_key, ready_key, leased_key, messages_key, refs_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local batch = tonumber(ARGV[2])
if redis.call('SREM', attached_key, ARGV[1]) == 1 then
  redis.call('HINCRBY', state_key, 'attachVersion', 1)
end
redis.call('DEL', config_key)
local entries = redis.call('LPOP', ready_key, batch) or {}
local leases = redis.call('ZPOPMIN', leased_key, batch)
for i = 1, #leases, 2 do entries[#entries + 1] = leases[i] end
for _, entry in ipairs(entries) do
  release_body(messages_key, refs_key, (split_entry(entry)))
end
return redis.call('LLEN', ready_key) + redis.call('ZCARD', leased_key)
