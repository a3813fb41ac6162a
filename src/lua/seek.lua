--[[
  seek: sets a subscription's acknowledgement state from a publish time, as Pub/Sub's Seek to a
  time does: every message the subscription retains that was published at or after the target
  is unacknowledged, every one before it acknowledged; or from a snapshot of the topic, as Seek
  to a snapshot does: the messages the snapshot holds are unacknowledged, and so is everything
  the log kept from the snapshot's cut on (a filtered subscription: what its filter takes),
  every other message acknowledged. It retains its unacknowledged messages (younger than its
  retention) and, from the topic's log (while the topic retains), the messages it took since it
  was created, when it retains acknowledged messages or the topic retains (with the topic's own
  retention, also those from before it was created); a filtered subscription only those its
  filter took, as the selections publish wrote say, or, for messages published before it was
  created, as the broker's earlier selections say. Outstanding
  leases end: the messages still unacknowledged are available at once, in publish order (with
  ordering, each key from its oldest message on), but for those scheduled for a delivery time
  still ahead, which wait for it.
  KEYS[1]    subscription config (HASH retentionUs, startSeq, ordered, retainAcked, ...)
  KEYS[2]    ready list
  KEYS[3]    leases
  KEYS[4]    delayed
  KEYS[5]    forwarding
  KEYS[6]    keyed ZSET
  KEYS[7]    keyed deliveries
  KEYS[8]    key states
  KEYS[9]    selections (HASH block -> taken flags; filtered subscriptions only)
  KEYS[10]   prefix of the body block keys (see body_location in prelude.lua)
  KEYS[11]   body reference counts
  KEYS[12]   the topic's retained log (ZSET block -> latest publish time in it, µs)
  KEYS[13]   the log's earliest publish times (ZSET block -> earliest publish time in it, µs)
  KEYS[14]   earlier selections: a filtered subscription's flags of the log's messages published
             before it was created (HASH block -> 1000 flags, '1' where its filter takes the
             message), written by the broker for this seek only and deleted by it
  KEYS[15]   the topic's messages scheduled for later, while it retains (ZSET seq -> delivery
             time, µs)
  KEYS[16]   holds (HASH block -> held flags; see mark_holds in prelude.lua)
  KEYS[17]   hold blocks (ZSET block -> block)
  KEYS[18..] a seek to a snapshot: the snapshot's held messages (HASH block -> 1000 flags) and
             its info (HASH cut, ...); a seek to a time passes neither
  ARGV[1]    time override in microseconds, or ''
  ARGV[2]    the target publish time (µs); ignored by a seek to a snapshot
  ARGV[3]    the topic's messageRetentionDuration in µs, or '' when it has none
  ARGV[4]    '1' when the subscription has a filter, else ''
  ARGV[5]    wake channel (published to, with their count, when messages are available after the
             seek)
  Returns    {REPLY_OK, unacked}: how many messages are unacknowledged after the seek
             {REPLY_NO_SUBSCRIPTION}   the subscription does not exist here
             {REPLY_NO_SNAPSHOT}       the snapshot does not exist here (nothing changed)
  Invariant: the invariants of SCHEMA.md hold after the seek as before it: every unacknowledged
             message is in exactly one place (`ready`, or `keyed` with its key queued) and
             holds one body reference, and the ones it no longer holds are released. A message
             that was delivered keeps its generation (a lease the seek ended counts as a
             delivery attempt, but is uncounted on a keyed message, as a cascade's), and one
             that comes back acknowledged starts a new epoch of generations, so no ack ID from
             before the seek matches a later delivery of it. Its cost is bounded by the
             messages it holds before and after, and the blocks of the log it reads.
]]
local config_key, ready_key, leased_key, delayed_key, forwarding_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local keyed_key, deliveries_key, states_key, selections_key = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local bodies_prefix, refs_key, log_key = KEYS[10], KEYS[11], KEYS[12]
local now = now_us(ARGV[1])
local config = redis.call('HMGET', config_key, 'retentionUs', 'startSeq', 'ordered', 'retainAcked')
if not config[1] then return {REPLY_NO_SUBSCRIPTION} end
local earlier_key = KEYS[14]
local holds = { flags = KEYS[16], blocks = KEYS[17] }
local to_snapshot = #KEYS >= 19
local snapshot_held_key, cut = KEYS[18], nil
if to_snapshot then
  cut = tonumber(redis.call('HGET', KEYS[19], 'cut') or '')
  if not cut then
    redis.call('DEL', earlier_key)
    return {REPLY_NO_SNAPSHOT}
  end
end
mark_active(config_key, now)
local topic_retention = tonumber(ARGV[3]) or 0
local filtered = ARGV[4] == '1'
local oldest_kept = now - math.max(tonumber(config[1]), topic_retention)
local start_seq = tonumber(config[2] or '0')
local ordered = config[3] == '1'
-- target: the publish time from which messages are unacknowledged. first_own: the log's
-- messages from this seq on are the subscription's (a filtered one's, before start_seq, as the
-- earlier selections say). replays_log: whether the log's messages are its to take again at all.
local target, first_own, replays_log
if to_snapshot then
  -- The snapshot kept the log from its cut on: those messages are every subscription's.
  target, first_own, replays_log = -math.huge, cut, true
else
  -- Before the subscription was created, only through the topic's own retention; acknowledged
  -- ones only while it retains them, or the topic does.
  target = tonumber(ARGV[2])
  first_own = topic_retention > 0 and 0 or start_seq
  replays_log = config[4] == '1' or topic_retention > 0
end

-- What the subscription holds now: seq -> the generation it was last delivered as (0: never),
-- for keyed messages their key and how many of those deliveries were uncounted.
-- held_fields: block -> the fields of its held seqs (so that a block's held messages are found
-- without looking up all 1000 of its seqs).
local held, held_fields, key_of, uncounted = {}, {}, {}, {}
local function note_held(seq)
  if held[seq] ~= nil then return end
  local block = string.sub(seq, 1, -4)
  local fields = held_fields[block]
  if not fields then
    fields = {}
    held_fields[block] = fields
  end
  fields[#fields + 1] = string.sub(seq, -3)
end
local function hold(entry)
  local colon = string.find(entry, ':', 1, true)
  if not colon then
    note_held(entry)
    held[entry] = held[entry] or 0
  elseif colon ~= 2 or string.byte(entry, 1) ~= 107 then -- not a key marker "k:<key>"
    local seq, gen = string.sub(entry, 1, colon - 1), tonumber(string.sub(entry, colon + 1))
    note_held(seq)
    if (held[seq] or -1) < gen then held[seq] = gen end
  end
end
for _, entry in ipairs(held_entries(ready_key, delayed_key, leased_key, forwarding_key)) do hold(entry) end

-- The messages whose delivery time is still ahead: seq -> that time. The topic's scheduled set
-- names them while it retains; what the subscription holds says it too: a time on a delivery that
-- failed no attempt in its epoch is a delivery time (a backoff follows a failed attempt).
local scheduled = {}
local after_now = '(' .. string.format('%.0f', now)
local ahead = redis.call('ZRANGEBYSCORE', KEYS[15], after_now, '+inf', 'WITHSCORES')
for i = 1, #ahead, 2 do scheduled[ahead[i]] = tonumber(ahead[i + 1]) end
local waiting_now = redis.call('ZRANGEBYSCORE', delayed_key, after_now, '+inf', 'WITHSCORES')
for i = 1, #waiting_now, 2 do
  local time = tonumber(waiting_now[i + 1])
  each_entry(waiting_now[i], function(entry)
    if is_key_marker(entry) then return end
    local seq, gen = split_entry(entry)
    if attempts_of(gen) == 0 then scheduled[seq] = time end
  end)
end
if ordered then
  for _, member in ipairs(redis.call('ZRANGE', keyed_key, 0, -1)) do
    local seq = keyed_member_seq(member)
    note_held(seq)
    held[seq] = held[seq] or 0
    key_of[seq] = string.sub(member, 5, -17)
  end
  local deliveries = redis.call('HGETALL', deliveries_key)
  for i = 1, #deliveries, 2 do
    local seq = deliveries[i]
    local gen, state, _, cut_short, due = split_keyed_delivery(deliveries[i + 1])
    note_held(seq)
    held[seq] = gen
    if due and due > now and attempts_of(gen) == 0 then scheduled[seq] = due end
    -- A keyed lease the seek ends was cut short, as by a cascade.
    uncounted[seq] = is_outstanding(state) and cut_short + 1 or cut_short
  end
end
redis.call('DEL', ready_key, leased_key, delayed_key, forwarding_key, keyed_key, deliveries_key, states_key, holds.flags, holds.blocks)
redis.call('HDEL', config_key, 'inRuns')

-- The blocks to look at: those of the messages held, and the log's that hold messages published
-- at or after the target (a block's score is its latest publish time).
local blocks, logged = {}, {}
local function add_block(block)
  if not blocks[block] then
    blocks[block] = true
    blocks[#blocks + 1] = block
  end
end
for block in pairs(held_fields) do add_block(block) end
-- The snapshot's held messages: block -> its flags.
local snapshot_flags = {}
if to_snapshot then
  local entries = redis.call('HGETALL', snapshot_held_key)
  for i = 1, #entries, 2 do
    snapshot_flags[entries[i]] = entries[i + 1]
    add_block(entries[i])
  end
end
for _, block in ipairs(replays_log and redis.call('ZRANGEBYSCORE', log_key, target, '+inf') or {}) do
  if (tonumber(block) + 1) * SEQS_PER_BLOCK > first_own then
    logged[block] = true
    add_block(block)
  end
end
local order = {}
for i = 1, #blocks do order[i] = blocks[i] end
table.sort(order, function(a, b) return tonumber(a) < tonumber(b) end)

-- The publish times the log knows of each block (nil: not logged), read in chunks.
local function scores_of(key)
  local scores = {}
  in_chunks(order, 1, function(chunk)
    local found = redis.call('ZMSCORE', key, unpack(chunk))
    for i, block in ipairs(chunk) do scores[block] = found[i] and tonumber(found[i]) or nil end
  end)
  return scores
end
-- A block whose every message was published before the target needs no reading: with a target
-- beyond any publish time yet (the purge; see STAMP_MAX_AHEAD_US), or a logged block whose
-- latest publish time is before it. Nor does one whose every message was published at or after
-- it and within the retention, unless the subscription orders (the bodies hold the keys).
local purge = not to_snapshot and target > now + STAMP_MAX_AHEAD_US
local latest = purge and {} or scores_of(log_key)
local earliest = (purge or ordered) and {} or scores_of(KEYS[13])
local function all_before(block)
  return purge or (latest[block] ~= nil and latest[block] < target)
end
local function all_after(block)
  local first = earliest[block]
  return first ~= nil and first >= target and first >= oldest_kept
end

-- The ordering key stored in a body (see message-codec.ts), or nil. One the broker cannot have
-- written (the JSON does not decode) counts as none: the seek must not fail half-way.
local function ordering_key_of(body)
  local b1, b2, b3, b4 = string.byte(body, 17, 20)
  local length = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  if length == 0 then return nil end
  local decoded, meta = pcall(cjson.decode, string.sub(body, 21, 20 + length))
  local key = decoded and type(meta) == 'table' and meta[2]
  if type(key) ~= 'string' or key == '' then return nil end
  return key
end

-- A message acknowledged before comes back in a new epoch of generations (see GEN_EPOCH).
local epoch_gen
local function next_epoch()
  epoch_gen = epoch_gen or redis.call('HINCRBY', config_key, 'epoch', 1) * GEN_EPOCH
  return epoch_gen
end

local unacked, queued_keys = 0, {}
local ready, waiting, keyed, deliveries, taken_again, released, unacked_seqs = {}, {}, {}, {}, {}, {}, {}
local function flush(force)
  if #ready >= 1000 or (force and #ready > 0) then
    redis.call('RPUSH', ready_key, unpack(ready))
    ready = {}
  end
  if #waiting >= 2000 or (force and #waiting > 0) then
    redis.call('ZADD', delayed_key, unpack(waiting))
    waiting = {}
  end
  if #keyed >= 2000 or (force and #keyed > 0) then
    redis.call('ZADD', keyed_key, unpack(keyed))
    keyed = {}
  end
  if #deliveries >= 2000 or (force and #deliveries > 0) then
    redis.call('HSET', deliveries_key, unpack(deliveries))
    deliveries = {}
  end
end

-- seq is unacknowledged after the seek; key: its ordering key on an ordered subscription. One
-- scheduled for later waits for its time, as publish.lua left it.
local function unack(seq, gen, key)
  unacked = unacked + 1
  unacked_seqs[unacked] = seq
  local due = scheduled[seq]
  if key then
    keyed[#keyed + 1] = 0
    keyed[#keyed + 1] = keyed_member(key, seq)
    if gen > 0 or due then
      deliveries[#deliveries + 1] = seq
      deliveries[#deliveries + 1] = keyed_delivery(gen, 'w', key, uncounted[seq] or 0, due)
    end
    -- A key is queued with its first message as its only one ('q<seq>'), until a second comes.
    local queued = queued_keys[key]
    if not queued then
      queued_keys[key] = 'one'
      redis.call('HSET', states_key, key, 'q' .. seq)
      ready[#ready + 1] = 'k:' .. key
    elseif queued == 'one' then
      queued_keys[key] = 'more'
      redis.call('HSET', states_key, key, 'q')
    end
  else
    local entry = gen > 0 and (seq .. ':' .. gen) or seq
    if due then
      waiting[#waiting + 1] = due
      waiting[#waiting + 1] = entry
    else
      ready[#ready + 1] = entry
    end
  end
  flush(false)
end

-- The fields of a block, '000' … '999'.
local FIELDS = {}
for i = 0, SEQS_PER_BLOCK - 1 do FIELDS[i] = string.format('%03d', i) end

-- Takes or releases each of the subscription's messages in a block, in seq order. present:
-- field -> body (or true where the body was not read: every message of the block is at or after
-- the target and within the retention, or it is a snapshot's and the subscription does not
-- order); a message is a candidate if the subscription holds it (a seek to a time) or the
-- snapshot does, or, in a logged block, from its first own seq on as its filter took it:
-- flags (publish's selections) from start_seq on, earlier (the broker's) before it.
local function settle_block(block, present, flags, earlier)
  local block_start = tonumber(block) * SEQS_PER_BLOCK
  local first_field = logged[block] and math.max(0, first_own - block_start) or SEQS_PER_BLOCK
  local start_field = start_seq - block_start
  local snapshot_holds = snapshot_flags[block]
  -- Whether its filter takes message i of the block (a subscription without one takes all).
  local function selected(i)
    if not filtered then return true end
    if i < start_field then return earlier ~= nil and string.byte(earlier, i + 1) == 49 end
    return not flags or string.byte(flags, i + 1) ~= 48
  end
  for i = 0, SEQS_PER_BLOCK - 1 do
    local body = present[FIELDS[i]]
    if body then
      local seq = block .. FIELDS[i]
      local gen = held[seq]
      local candidate
      if to_snapshot then
        candidate = snapshot_holds ~= nil and string.byte(snapshot_holds, i + 1) == 49
      else
        candidate = gen ~= nil
      end
      local unacked_after = false
      if candidate or (i >= first_field and selected(i)) then
        local stamp = body == true and math.huge or tonumber(string.sub(body, 1, 16))
        unacked_after = stamp >= target and stamp >= oldest_kept
      end
      if unacked_after then
        if gen == nil then
          taken_again[#taken_again + 1] = seq
          gen = next_epoch()
        end
        unack(seq, gen, ordered and (key_of[seq] or (body ~= true and ordering_key_of(body))) or nil)
      elseif gen ~= nil then
        released[#released + 1] = seq
      end
    end
  end
end

for _, block in ipairs(order) do
  if all_before(block) then
    for _, field in ipairs(held_fields[block] or {}) do released[#released + 1] = block .. field end
  else
    local block_key = bodies_prefix .. block
    local flags = logged[block] and filtered and redis.call('HGET', selections_key, block) or nil
    local earlier = logged[block] and filtered and (tonumber(block) * SEQS_PER_BLOCK < start_seq)
      and redis.call('HGET', earlier_key, block) or nil
    local present = {}
    if logged[block] and all_after(block) then
      for _, field in ipairs(redis.call('HKEYS', block_key)) do present[field] = true end
    elseif logged[block] then
      local fields = redis.call('HGETALL', block_key)
      for i = 1, #fields, 2 do present[fields[i]] = fields[i + 1] end
    else
      local wanted, wanted_field, snapshot_holds = {}, {}, snapshot_flags[block]
      for _, field in ipairs(held_fields[block] or {}) do
        wanted[#wanted + 1] = field
        wanted_field[field] = true
      end
      local position = snapshot_holds and string.find(snapshot_holds, '1', 1, true)
      while position do
        local field = FIELDS[position - 1]
        if not wanted_field[field] then wanted[#wanted + 1] = field end
        position = string.find(snapshot_holds, '1', position + 1, true)
      end
      if to_snapshot and not ordered then
        -- Held by the subscription or the snapshot, so stored; no publish time to compare.
        for _, field in ipairs(wanted) do present[field] = true end
      else
        local found = redis.call('HMGET', block_key, unpack(wanted))
        for i, field in ipairs(wanted) do present[field] = found[i] or nil end
      end
    end
    settle_block(block, present, flags or nil, earlier or nil)
  end
end
flush(true)

-- Each message taken again holds one more body reference (the log, or a snapshot, holds one
-- already); each one acknowledged by the seek gives its reference back.
hold_bodies(refs_key, taken_again)
mark_holds(holds, unacked_seqs, '1')
redis.call('DEL', earlier_key)
in_chunks(released, 1, function(chunk) release_bodies(bodies_prefix, refs_key, chunk) end)
if unacked > 0 then redis.call('PUBLISH', ARGV[5], unacked) end
return {REPLY_OK, unacked}
