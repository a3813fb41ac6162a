--[[
  drop-subscription: detaches a subscription and releases, in bounded batches, the message
  bodies it still holds. Called repeatedly until it returns 0; safe to repeat after a crash.
  KEYS[1]    topic state (HASH: block, used, attachVersion, deleted)
  KEYS[2]    attached subscriptions (HASH uid -> ordered flag)
  KEYS[3]    the subscription's config (HASH)
  KEYS[4]    its ready list
  KEYS[5]    its leases
  KEYS[6]    prefix of the body block keys (see body_location in prelude.lua)
  KEYS[7]    body reference counts
  KEYS[8]    its keyed ZSET (ordered subscriptions)
  KEYS[9]    its keyed deliveries (HASH)
  KEYS[10]   its key states (HASH)
  KEYS[11]   its delayed set (ZSET)
  KEYS[12]   its forwarding set (ZSET)
  KEYS[13]   the topic's retainers (HASH subscription uid -> retention, µs)
  KEYS[14]   its selections (HASH block -> taken flags)
  KEYS[15]   its holds (HASH block -> held flags; see mark_holds in prelude.lua)
  KEYS[16]   its hold blocks (ZSET block -> block)
  ARGV[1]    subscription uid
  ARGV[2]    how many entries to release from each structure in this call (of the delayed set,
             entries until they stand for that many messages)
  Returns    the number of entries still held (0 = fully dropped)
  Invariant: after the first call the subscription receives nothing new; every body reference
             it held is released exactly once (a keyed message is released through the keyed
             ZSET only, even while it is also leased or being forwarded).
]]
local state_key, attached_key, config_key, ready_key, leased_key, bodies_prefix, refs_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local keyed_key, deliveries_key, key_states_key, delayed_key, forwarding_key = KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local batch = tonumber(ARGV[2])
if redis.call('HDEL', attached_key, ARGV[1]) == 1 then
  redis.call('HINCRBY', state_key, 'attachVersion', 1)
end
redis.call('DEL', config_key, KEYS[14])
if redis.call('HDEL', KEYS[13], ARGV[1]) == 1 then update_retention(state_key, KEYS[13]) end

local seqs = {}
-- A ready-list entry holds its message's body; a key marker holds nothing.
local function release_entry(entry)
  if not is_key_marker(entry) then seqs[#seqs + 1] = (split_entry(entry)) end
end
for _, entry in ipairs(redis.call('LPOP', ready_key, batch) or {}) do release_entry(entry) end
-- A run entry stands for up to a thousand messages: entries until their messages make a batch.
local delayed, released = redis.call('ZRANGE', delayed_key, 0, batch - 1), {}
for _, entry in ipairs(delayed) do
  if #seqs >= batch then break end
  released[#released + 1] = entry
  each_entry(entry, release_entry)
end
if #released > 0 then redis.call('ZREM', delayed_key, unpack(released)) end
-- Leases and forwards of keyed messages are released through the keyed ZSET.
for _, held in ipairs({ leased_key, forwarding_key }) do
  local entries = redis.call('ZPOPMIN', held, batch)
  for i = 1, #entries, 2 do
    local seq = split_entry(entries[i])
    if redis.call('HEXISTS', deliveries_key, seq) == 0 then seqs[#seqs + 1] = seq end
  end
end
local keyed = redis.call('ZPOPMIN', keyed_key, batch)
for i = 1, #keyed, 2 do seqs[#seqs + 1] = keyed_member_seq(keyed[i]) end
if #seqs > 0 then release_bodies(bodies_prefix, refs_key, seqs) end
local hold_blocks = redis.call('ZPOPMIN', KEYS[16], batch)
for i = 1, #hold_blocks, 2 do redis.call('HDEL', KEYS[15], hold_blocks[i]) end

local remaining = redis.call('LLEN', ready_key) + redis.call('ZCARD', leased_key) + redis.call('ZCARD', keyed_key)
  + redis.call('ZCARD', delayed_key) + redis.call('ZCARD', forwarding_key) + redis.call('ZCARD', KEYS[16])
if remaining == 0 then redis.call('DEL', deliveries_key, key_states_key) end
return remaining
