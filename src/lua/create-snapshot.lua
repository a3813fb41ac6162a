--[[
  create-snapshot: records a subscription's acknowledgement state in this region, as Pub/Sub's
  CreateSnapshot does: the messages it has not acknowledged (each then holds one more body
  reference, the snapshot's), and the seq from which everything published later belongs to the
  snapshot too (the log keeps those while the snapshot lives: it is one of the topic's
  retainers, for as long as the snapshot can live). Repeating it after it succeeded (a retry)
  changes nothing and answers as the first call did.
  KEYS[1]    topic state (HASH block, used, retainUs, ...)
  KEYS[2]    the topic's retainers (HASH uid -> retention, µs)
  KEYS[3]    the subscription's ready list
  KEYS[4]    its delayed set
  KEYS[5]    its leases
  KEYS[6]    its forwarding set
  KEYS[7]    its keyed ZSET (ordered subscriptions)
  KEYS[8]    prefix of the body block keys (see body_location in prelude.lua)
  KEYS[9]    body reference counts
  KEYS[10]   the snapshot's held messages (HASH block -> 1000 flags, '1' where it holds the seq)
  KEYS[11]   the snapshot's info (HASH cut, held, oldest, at)
  ARGV[1]    time override in microseconds, or ''
  ARGV[2]    the retainers field of the snapshot ("snapshot:<uid>")
  ARGV[3]    the longest a snapshot lives (µs): the log keeps what is published after the cut
             for that long at most
  Returns    {REPLY_OK, held, oldest, at}: how many messages it holds, the publish time (µs) of
             the oldest of them ('' when none), and when it was made (µs). A subscription not
             attached here (its topic deleted in this region) holds nothing: its snapshot here
             is only the cut.
  Invariant: every message the snapshot holds has one body reference of the snapshot's, taken
             once; the cut is the first seq no publish had taken when the snapshot was made.
]]
local state_key, retainers_key = KEYS[1], KEYS[2]
local bodies_prefix, refs_key, held_key, info_key = KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local recorded = redis.call('HMGET', info_key, 'held', 'oldest', 'at')
if recorded[1] then return {REPLY_OK, tonumber(recorded[1]), recorded[2], recorded[3]} end
local now = now_us(ARGV[1])

-- The seqs the subscription has not acknowledged, wherever they are (SCHEMA.md, invariant 1).
local seqs, seen = {}, {}
local function hold(seq)
  if not seen[seq] then
    seen[seq] = true
    seqs[#seqs + 1] = seq
  end
end
for _, entry in ipairs(held_entries(KEYS[3], KEYS[4], KEYS[5], KEYS[6])) do
  if not is_key_marker(entry) then hold((split_entry(entry))) end
end
for _, member in ipairs(redis.call('ZRANGE', KEYS[7], 0, -1)) do hold(keyed_member_seq(member)) end

-- Flags per block, and the oldest message (the lowest seq: seqs grow with publishing).
local flags, oldest_seq = {}, nil
for _, seq in ipairs(seqs) do
  local block, field = string.sub(seq, 1, -4), tonumber(string.sub(seq, -3))
  local block_flags = flags[block]
  if not block_flags then
    block_flags = {}
    for i = 1, SEQS_PER_BLOCK do block_flags[i] = '0' end
    flags[block] = block_flags
  end
  block_flags[field + 1] = '1'
  if not oldest_seq or tonumber(seq) < tonumber(oldest_seq) then oldest_seq = seq end
end
local fields = {}
for block, block_flags in pairs(flags) do
  fields[#fields + 1] = block
  fields[#fields + 1] = table.concat(block_flags)
  if #fields >= 200 then
    redis.call('HSET', held_key, unpack(fields))
    fields = {}
  end
end
if #fields > 0 then redis.call('HSET', held_key, unpack(fields)) end

-- One more reference on each held body: the snapshot's.
hold_bodies(refs_key, seqs)

local oldest = ''
if oldest_seq then
  local key, field = body_location(bodies_prefix, oldest_seq)
  oldest = string.sub(redis.call('HGET', key, field) or '', 1, 16)
end
local position = redis.call('HMGET', state_key, 'block', 'used')
local cut = tonumber(position[1] or '0') * SEQS_PER_BLOCK + tonumber(position[2] or SEQS_PER_BLOCK)
local at = string.format('%.0f', now)
redis.call('HSET', info_key, 'cut', string.format('%d', cut), 'held', #seqs, 'oldest', oldest, 'at', at)
-- What is published from now on is the snapshot's until it expires: at most its longest life
-- after its oldest message (or after now, when it holds none).
local lives_until = (tonumber(oldest) or now) + tonumber(ARGV[3])
redis.call('HSET', retainers_key, ARGV[2], string.format('%.0f', math.max(lives_until - now, 1)))
update_retention(state_key, retainers_key)
return {REPLY_OK, #seqs, oldest, at}
