--[[
  index-holds: writes a subscription's holds (see mark_holds in prelude.lua) from what it holds,
  for a store laid out before holds were kept (storage format 5 and earlier,
  src/redis/storage-format.ts).
  KEYS[1]    subscription config (its absence: no such subscription here)
  KEYS[2]    ready list
  KEYS[3]    leases
  KEYS[4]    delayed (ZSET; a run entry "<first>-<last>" stands for its seqs)
  KEYS[5]    forwarding
  KEYS[6]    keyed ZSET
  KEYS[7]    holds (HASH block -> held flags)
  KEYS[8]    hold blocks (ZSET block -> block)
  ARGV none
  Returns    REPLY_OK, or REPLY_NO_SUBSCRIPTION
  Invariant: afterwards the holds flag exactly the messages the subscription holds un-acked
             (SCHEMA.md, invariant 1): they are written whole, so running it again changes
             nothing. Its cost is about a microsecond per message held, as a seek's.
]]
if redis.call('EXISTS', KEYS[1]) == 0 then return REPLY_NO_SUBSCRIPTION end
redis.call('DEL', KEYS[7], KEYS[8])
-- A keyed message may be both in the keyed ZSET and leased or being forwarded: flagged once.
local seqs, seen = {}, {}
local function add(seq)
  if seen[seq] then return end
  seen[seq] = true
  seqs[#seqs + 1] = seq
end
for _, entry in ipairs(held_entries(KEYS[2], KEYS[4], KEYS[3], KEYS[5])) do
  if not is_key_marker(entry) then add((split_entry(entry))) end
end
for _, member in ipairs(redis.call('ZRANGE', KEYS[6], 0, -1)) do add(keyed_member_seq(member)) end
mark_holds({ flags = KEYS[7], blocks = KEYS[8] }, seqs, '1')
return REPLY_OK
