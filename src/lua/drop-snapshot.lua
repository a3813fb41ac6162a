--[[
  drop-snapshot: lets go of a snapshot in this region, in bounded batches: it stops retaining
  what is published, and its body references are released. Called repeatedly until it returns
  0; safe to repeat after a crash, and on a snapshot this region never had.
  KEYS[1]    topic state (HASH retainUs, ...)
  KEYS[2]    the topic's retainers (HASH uid -> retention, µs)
  KEYS[3]    prefix of the body block keys (see body_location in prelude.lua)
  KEYS[4]    body reference counts
  KEYS[5]    the snapshot's held messages (HASH block -> 1000 flags)
  KEYS[6]    the snapshot's info (HASH cut, held, oldest)
  ARGV[1]    the retainers field of the snapshot ("snapshot:<uid>")
  ARGV[2]    how many blocks of held messages to release in this call
  Returns    the number of blocks still held (0 = fully dropped)
  Invariant: each body reference the snapshot took is released exactly once: a block's flags
             go in the same call as the references they name.
]]
local state_key, retainers_key, bodies_prefix, refs_key, held_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if redis.call('HDEL', retainers_key, ARGV[1]) == 1 then update_retention(state_key, retainers_key) end
-- Without its info a snapshot is no seek's target any more (seek.lua), even half released.
redis.call('DEL', KEYS[6])
local batch = tonumber(ARGV[2])
-- Any few blocks will do: HRANDFIELD costs the count asked for, where a scan from the first
-- bucket on would find nothing once the first buckets are emptied.
local blocks = redis.call('HRANDFIELD', held_key, batch)
local done = {}
for _, block in ipairs(blocks) do
  local flags = redis.call('HGET', held_key, block)
  local seqs = {}
  for position = 1, SEQS_PER_BLOCK do
    if string.byte(flags, position) == 49 then seqs[#seqs + 1] = block .. string.format('%03d', position - 1) end
  end
  if #seqs > 0 then release_bodies(bodies_prefix, refs_key, seqs) end
  done[#done + 1] = block
end
if #done > 0 then redis.call('HDEL', held_key, unpack(done)) end
return redis.call('HLEN', held_key)
