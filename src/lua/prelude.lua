-- Shared by the scripts: src/redis/scripts.ts prepends to each the top-level definitions of this
-- file it uses (src/redis/prelude.ts). Every top-level line is a `local` definition or a comment.

-- Reply codes. src/redis/calls/codes.ts defines the same names with the same values, for the
-- wrappers that decode them (test/lua/script-headers.test.ts checks that both sides agree, and
-- that each script's header names the codes it answers).
local REPLY_OK = 1
local REPLY_REFUSED = 0 -- put-topic, put-data-owner: the state there was kept (see may_put); reschedule-expiry: the record changed; settle-log: the entry moved
local REPLY_TOPIC_DELETED = -1 -- the topic incarnation is closed to publishing and attaching
local REPLY_NO_SUBSCRIPTION = -1 -- the subscription is not attached (deleted, or never attached here)
local REPLY_NO_SNAPSHOT = -5 -- seek: the snapshot is not recorded here (deleted, or never made here)
local REPLY_ATTACHMENTS_CHANGED = -2 -- publish: re-read the attached subscriptions and retry
local REPLY_STAMP_REFUSED = -3 -- publish: the publish time is too far from the script's clock
local REPLY_FORWARDED_BEFORE = -4 -- publish: a forwarded message was stored before
local REPLY_PAST_RETENTION = -6 -- publish: a message is scheduled past the retention of a subscription taking it
local REPLY_LEASES_REFUSED = -7 -- acknowledge-and-publish: not every lease is current; nothing changed
local REPLY_PUBLISH_REFUSED = -8 -- acknowledge-and-publish: its publish refused; nothing changed
local REPLY_PROJECT_FULL = -9 -- put-topic, put-data-owner: a create past the project's limit of names of its kind
local REPLY_TOPIC_FULL = -10 -- put-data-owner: a create past the topic's limit of subscriptions
-- Per delivery (acknowledge, acknowledge-ordered, modify-ack-deadline).
local DELIVERY_GONE = 0 -- no such lease: acknowledged, superseded, nacked, or unknown
local DELIVERY_APPLIED = 1
local DELIVERY_EXPIRED = 2 -- the lease expired (changed anyway, except on exactly-once subscriptions)
local DELIVERY_OUT_OF_ORDER = 3 -- acknowledge-ordered, exactly-once: an earlier message of the key is un-acked

-- The one clock (README.md, Semantics, "One clock"): the Redis server's TIME, in microseconds,
-- unless the caller passes an explicit time (tests drive time with a manual clock).
local function now_us(override)
  if override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Wake-ups of a publish's listeners (the broker's leasers, src/broker/leaser.ts): `wake` PUBLISHes
-- on the channel how many new messages there are, at once, unless a script gathers them in
-- gathered_wakes (channel -> count) to send once per channel at its end (publish-batch.lua).
local gathered_wakes

local function wake(channel, count)
  if gathered_wakes then
    gathered_wakes[channel] = (gathered_wakes[channel] or 0) + count
  else
    redis.call('PUBLISH', channel, count)
  end
end

-- How far a publish time may lie behind and ahead of the publish script's clock (publish.lua):
-- no message is stamped later than STAMP_MAX_AHEAD_US after the time it was stored.
local STAMP_MAX_BEHIND_US, STAMP_MAX_AHEAD_US = 10000000, 1000000

-- Records that the subscription was used now (its expirationPolicy counts from this).
local function mark_active(config_key, now)
  redis.call('HSET', config_key, 'activeAt', string.format('%.0f', now))
end

-- Whether the subscription's settings here come from a newer record than the caller's (of
-- `version`; '' when the caller asks no check). A caller that remembered the record runs a
-- script with its version: the script then answers as if the subscription were not there
-- (REPLY_NO_SUBSCRIPTION) before it changes anything, and the caller reads the record again.
-- Every put of a live record writes its version here (attach-subscription.lua); a delete or
-- detach drops the settings.
local function newer_settings(config_key, version)
  if version == '' then return false end
  return tonumber(redis.call('HGET', config_key, 'version') or '-1') > tonumber(version)
end

-- The delivery mode of a subscription: nil when it does not exist, else true on exactly-once.
local function exactly_once_mode(config_key)
  local flag = redis.call('HGET', config_key, 'exactlyOnce')
  if not flag then return nil end
  return flag == '1'
end

-- The lease of one delivery, from its deadline (false when it has no lease), for acknowledge
-- and modify-ack-deadline:
--   'gone'     no such lease: acknowledged, superseded by a newer delivery, nacked, or unknown
--   'refused'  expired, on an exactly-once subscription: nothing may change any more
--   'expired'  expired elsewhere: the change still applies (nothing was delivered again yet)
--   'valid'
local function lease_status(deadline, now, exactly_once)
  if not deadline then return 'gone' end
  if tonumber(deadline) > now then return 'valid' end
  return exactly_once and 'refused' or 'expired'
end

-- Per-delivery result codes of acknowledge, acknowledge-ordered and modify-ack-deadline, by lease
-- status. An expired lease answers DELIVERY_EXPIRED whether or not the change applied ('refused'
-- or 'expired'): the caller knows whether the subscription is exactly-once.
local RESULT = { gone = DELIVERY_GONE, valid = DELIVERY_APPLIED, expired = DELIVERY_EXPIRED, refused = DELIVERY_EXPIRED }

-- A subscription's redelivery policy, from its config fields minBackoffUs and maxBackoffUs (the
-- retry policy; '' or absent: none, redeliveries are immediate) and maxDeliveryAttempts (the
-- dead-letter policy; '' or absent: none): {min = µs, max = µs, limit = attempts}, nil for none.
local function redelivery_policy(min_us, max_us, max_attempts)
  local limit = max_attempts and max_attempts ~= '' and tonumber(max_attempts) or nil
  local backoff = min_us and min_us ~= ''
  if not backoff and not limit then return nil end
  return { min = backoff and tonumber(min_us) or nil, max = backoff and tonumber(max_us) or nil, limit = limit }
end


-- Generations run in epochs of GEN_EPOCH: a seek that brings back an acknowledged message (whose
-- last generation it no longer knows) starts it at the subscription's next epoch, so that its
-- new deliveries never take the generation, and so the ack ID, of an earlier one (seek.lua). A
-- generation's delivery attempts count within its epoch.
local GEN_EPOCH = 1048576
local function attempts_of(gen)
  return gen % GEN_EPOCH
end

-- Whether a message whose delivery failed `attempts` times goes to its dead-letter topic
-- instead of being delivered again.
local function dead_letters(policy, attempts)
  return policy ~= nil and policy.limit ~= nil and attempts >= policy.limit
end

-- How long a message waits before its next delivery after its attempts-th delivery failed (a
-- nack or an expired lease): min × 2^(attempts - 1), at most max (µs); 0 without a retry
-- policy, and for a message that goes to its dead-letter topic instead.
-- (The exponent is capped so that a zero minimum never meets an infinite factor.)
local function backoff_us(policy, attempts)
  if not policy or not policy.min or dead_letters(policy, attempts) then return 0 end
  return math.min(policy.min * 2 ^ math.min(attempts - 1, 40), policy.max)
end

-- Message bodies live in blocks of SEQS_PER_BLOCK seqs: the body of seq b * SEQS_PER_BLOCK + i
-- is field i (three digits) of the hash `<bodies prefix><b>`. So a seq's digits name its body:
-- the block is all but the last three, the field the last three (src/redis/keys.ts, SCHEMA.md).
local SEQS_PER_BLOCK = 1000

-- Whole numbers as text, in one format. Lua turns a number into a string, in a concatenation or
-- as an argument of redis.call, through sprintf's float formats, which cost more than most of
-- what a pull does per message: a script run formats each number once per format.
local function number_texts(format)
  local texts = {}
  return function(n)
    local text = texts[n]
    if not text then
      text = string.format(format, n)
      texts[n] = text
    end
    return text
  end
end

-- The decimal text of a whole number (a generation, a count).
local int_text = number_texts('%d')

-- The key and field of message `seq`'s body (seq a decimal string). The last block's key is
-- kept: a script's seqs come in runs from one publish, and a pull looks up a thousand of them.
local located_prefix, located_block, located_key
local function body_location(bodies_prefix, seq)
  local block = string.sub(seq, 1, -4)
  if block ~= located_block or bodies_prefix ~= located_prefix then
    located_prefix, located_block, located_key = bodies_prefix, block, bodies_prefix .. block
  end
  return located_key, string.sub(seq, -3)
end

-- Drops one subscription's reference to each message body; the last one deletes the body.
-- A missing refs entry means "one reference left" (saves memory on single-subscription topics).
-- One HMGET, at most one HDEL per body block and one for the refs. A block hash whose last
-- field goes is deleted by Redis itself.
local function release_bodies(bodies_prefix, refs_key, seqs)
  local refs = redis.call('HMGET', refs_key, unpack(seqs))
  local last_holder, second_last = {}, {}
  for i, seq in ipairs(seqs) do
    local count = refs[i] and tonumber(refs[i])
    if not count then
      local key, field = body_location(bodies_prefix, seq)
      local fields = last_holder[key]
      if not fields then
        fields = {}
        last_holder[key] = fields
      end
      fields[#fields + 1] = field
    elseif count <= 2 then
      second_last[#second_last + 1] = seq
    else
      redis.call('HINCRBY', refs_key, seq, -1)
    end
  end
  for key, fields in pairs(last_holder) do redis.call('HDEL', key, unpack(fields)) end
  if #second_last > 0 then redis.call('HDEL', refs_key, unpack(second_last)) end
end

-- A subscription's holds (SCHEMA.md): holds.flags (HASH) has, per body block, one character per
-- message of the block, '1' at each one the subscription holds un-acked; holds.blocks (ZSET) the
-- blocks that have any, scored by their number, so that the oldest un-acked message is one
-- ZRANGE and one search away (count-backlog.lua). A block's flags are read and written whole.

-- Rewrites the flags of block number `block` with edit(flags), setting flag ('1': held, '0':
-- released) at some of its messages; a block left without any '1' is dropped.
local function edit_holds(holds, block_number, flag, edit)
  local block = string.format('%d', block_number)
  local flags = redis.call('HGET', holds.flags, block)
  if not flags and flag == '1' then redis.call('ZADD', holds.blocks, block, block) end
  flags = edit(flags or string.rep('0', SEQS_PER_BLOCK))
  if flag == '1' or string.find(flags, '1', 1, true) then
    redis.call('HSET', holds.flags, block, flags)
  else
    redis.call('HDEL', holds.flags, block)
    redis.call('ZREM', holds.blocks, block)
  end
end

-- flags with `count` characters from position `first` on set to flag.
local function splice_flags(flags, first, count, flag)
  return string.sub(flags, 1, first - 1) .. string.rep(flag, count) .. string.sub(flags, first + count)
end

-- Runs of holds a script gathers to write once per block at its end (publish-batch.lua: the
-- publishes of a batch mostly take consecutive seqs of one block): a list of { holds, block,
-- runs = { {first, count}, ... } }, and by holds.flags and block, its entry. nil: written at once.
local gathered_holds

-- Holds the `count` consecutive seqs from `first_seq` (a number) on, all of one block: what a
-- publish gives a subscription that takes all of it, without a step per message.
local function hold_run(holds, first_seq, count)
  local block = math.floor(first_seq / SEQS_PER_BLOCK)
  local first = first_seq - block * SEQS_PER_BLOCK + 1
  if gathered_holds then
    local id = holds.flags .. ' ' .. block
    local entry = gathered_holds[id]
    if not entry then
      entry = { holds = holds, block = block, runs = {} }
      gathered_holds[id] = entry
      gathered_holds[#gathered_holds + 1] = entry
    end
    entry.runs[#entry.runs + 1] = { first, count }
    return
  end
  edit_holds(holds, block, '1', function(flags) return splice_flags(flags, first, count, '1') end)
end

-- Writes the runs gathered in gathered_holds: one edit per block, consecutive runs as one.
local function write_gathered_holds()
  for _, entry in ipairs(gathered_holds) do
    edit_holds(entry.holds, entry.block, '1', function(flags)
      local first, count = entry.runs[1][1], entry.runs[1][2]
      for i = 2, #entry.runs + 1 do
        local run = entry.runs[i]
        if run and run[1] == first + count then
          count = count + run[2]
        else
          flags = splice_flags(flags, first, count, '1')
          if run then first, count = run[1], run[2] end
        end
      end
      return flags
    end)
  end
end

-- Sets the flag of each of the seqs (decimal strings). They are grouped by arithmetic, not by
-- substrings (every new Lua string costs Redis a hash); a block's consecutive run is spliced.
local function mark_holds(holds, seqs, flag)
  local fields_of, blocks = {}, {}
  for _, seq in ipairs(seqs) do
    local number = tonumber(seq)
    local block = math.floor(number / SEQS_PER_BLOCK)
    local fields = fields_of[block]
    if not fields then
      fields = {}
      fields_of[block], blocks[#blocks + 1] = fields, block
    end
    fields[#fields + 1] = number - block * SEQS_PER_BLOCK + 1
  end
  for _, block in ipairs(blocks) do
    local fields = fields_of[block]
    local first, consecutive = fields[1], true
    for i, field in ipairs(fields) do
      if field ~= first + i - 1 then consecutive = false end
    end
    edit_holds(holds, block, flag, function(flags)
      if consecutive then return splice_flags(flags, first, #fields, flag) end
      local chars, code = { string.byte(flags, 1, -1) }, string.byte(flag)
      for _, field in ipairs(fields) do chars[field] = code end
      return string.char(unpack(chars))
    end)
  end
end

-- After a change of `retainers` (subscription uid -> retention, µs, of those that keep their
-- acknowledged messages): the topic state's retainUs is the longest of them, absent for none.
local function update_retention(state_key, retainers_key)
  local longest = 0
  for _, retention in ipairs(redis.call('HVALS', retainers_key)) do longest = math.max(longest, tonumber(retention)) end
  if longest > 0 then
    redis.call('HSET', state_key, 'retainUs', string.format('%.0f', longest))
  else
    redis.call('HDEL', state_key, 'retainUs')
  end
end

-- A change of what makes a topic incarnation retain (a record put, a retainer dropped): the
-- janitor looks at its log at the next pass (src/broker/replay.ts). The entry moves to now, and
-- always strictly below where it was, so that a pass that judged it before the change sees that
-- it moved (settle-log.lua).
local function mark_log(expiries_key, topic_uid, now)
  local at = now
  local current = tonumber(redis.call('ZSCORE', expiries_key, topic_uid))
  if current and current <= at then at = current - 1 end
  redis.call('ZADD', expiries_key, string.format('%.0f', at), topic_uid)
end

-- Counts one live record more (delta 1) or fewer (-1) that makes the incarnation retain.
local function count_log_retainer(retention_key, topic_uid, delta)
  if redis.call('HINCRBY', retention_key, topic_uid, delta) <= 0 then redis.call('HDEL', retention_key, topic_uid) end
end

-- Calls fn with list[first..] in chunks of at most 1000 (Lua's unpack cannot take tens of
-- thousands); fn must not change a chunk, which may be the list itself.
local function in_chunks(list, first, fn)
  local size = #list
  if first == 1 and size <= 1000 then
    if size > 0 then fn(list) end
    return
  end
  for start = first, size, 1000 do
    local chunk, count = {}, 0
    for i = start, math.min(start + 999, size) do
      count = count + 1
      chunk[count] = list[i]
    end
    fn(chunk)
  end
end

-- Gives each of the seqs one more body reference (a missing refs entry means one already).
local function hold_bodies(refs_key, seqs)
  in_chunks(seqs, 1, function(chunk)
    local counts = redis.call('HMGET', refs_key, unpack(chunk))
    local updates = {}
    for i, seq in ipairs(chunk) do
      updates[#updates + 1] = seq
      updates[#updates + 1] = (tonumber(counts[i]) or 1) + 1
    end
    redis.call('HSET', refs_key, unpack(updates))
  end)
end

-- A key marker "k:<key>" (ready list, delayed set) stands for an ordering key; every other entry
-- starts with a seq's digits. Told by its first two bytes, without making a string of them.
local function is_key_marker(entry)
  local first, second = string.byte(entry, 1, 2)
  return first == 107 and second == 58 -- 'k', ':'
end

-- A delayed entry "<first>-<last>" is a run: the consecutive seqs first .. last, none delivered
-- yet, scheduled for one time (publish.lua); the subscription config's inRuns counts what runs
-- hold beyond one entry each. Calls fn with each entry an entry stands for (a key marker
-- "k:<key>" is itself, whatever its key).
local function each_entry(entry, fn)
  local dash = string.find(entry, '-', 1, true)
  if not dash or is_key_marker(entry) then return fn(entry) end
  for seq = tonumber(string.sub(entry, 1, dash - 1)), tonumber(string.sub(entry, dash + 1)) do
    fn(string.format('%d', seq))
  end
end

-- Every delivery entry a subscription holds outside its keyed ZSET: its ready list, then its
-- delayed (runs taken apart), leased and forwarding sets (key markers "k:<key>" included).
local function held_entries(ready_key, delayed_key, leased_key, forwarding_key)
  local entries = redis.call('LRANGE', ready_key, 0, -1)
  local function add(entry) entries[#entries + 1] = entry end
  for _, set in ipairs({ delayed_key, leased_key, forwarding_key }) do
    for _, entry in ipairs(redis.call('ZRANGE', set, 0, -1)) do each_entry(entry, add) end
  end
  return entries
end

-- A delivery entry is "seq" (never delivered) or "seq:gen" (last delivered as generation gen).
local function split_entry(entry)
  local colon = string.find(entry, ':', 1, true)
  if not colon then return entry, 0 end
  return string.sub(entry, 1, colon - 1), tonumber(string.sub(entry, colon + 1))
end

-- The seq of a delivery entry, without reading its generation.
local function entry_seq(entry)
  local colon = string.find(entry, ':', 1, true)
  return colon and string.sub(entry, 1, colon - 1) or entry
end

-- ---- Ordered delivery (used by pull, modify-ack-deadline, acknowledge-ordered, drop-subscription) ----
-- A keyed message is the member <4-digit key length><key><16-digit seq> of the subscription's
-- `keyed` ZSET (all scores 0), so one lexicographic range holds one key's messages in order.
local key_length_text = number_texts('%04d')

local function key_prefix(key)
  return key_length_text(#key) .. key
end

-- seq is a seq's text, written in decimal without leading zeros everywhere, so padding it gives
-- what formatting the number with '%016d' would, without parsing and formatting it.
local SEQ_PADDING = string.rep('0', 16)
local function keyed_member(key, seq)
  return key_length_text(#key) .. key .. string.sub(SEQ_PADDING, #seq + 1) .. seq
end

-- The seq of a keyed member, written as everywhere else: its last 16 characters without the
-- padding's zeros (a match, cheaper than parsing and formatting the number).
local function keyed_member_seq(member)
  return string.match(member, '^0*(.+)', #member - 15)
end

-- Lexicographic range bounds of one key's members (the byte after the prefix is a digit).
local function key_range(key)
  local prefix = key_prefix(key)
  return '[' .. prefix, '(' .. prefix .. ';'
end

-- A keyed delivery is "<gen>|o|<key>" (outstanding), "<gen>|s|<key>" (outstanding, and the only
-- message of its key, whose state names it: 'q<seq>'), "<gen>|w|<key>" (waiting to be delivered
-- again) or "<gen>|f|<key>" (handed over to forward to the dead-letter topic), where <gen> may
-- go on with "/<uncounted>" and "/<uncounted>/<due>": uncounted is how many of its deliveries
-- were cut short by the cascade of an earlier message (they are no delivery attempts of its
-- own), due when a waiting one's retry backoff ends (µs).
-- -> gen, state, key, uncounted, due (nil: none)
local function split_keyed_delivery(info)
  local first = string.find(info, '|', 1, true)
  local head, state, key = string.sub(info, 1, first - 1), string.sub(info, first + 1, first + 1), string.sub(info, first + 3)
  if not string.find(head, '/', 1, true) then return tonumber(head), state, key, 0, nil end
  local gen, uncounted, due = string.match(head, '^(%d+)/(%d+)/?(%d*)$')
  return tonumber(gen), state, key, tonumber(uncounted), tonumber(due)
end

-- Whether a keyed delivery's state is a lease: 'o', or 's' (see split_keyed_delivery).
local function is_outstanding(state)
  return state == 'o' or state == 's'
end

local function keyed_delivery(gen, state, key, uncounted, due)
  local head = int_text(gen)
  if due then return head .. '/' .. int_text(uncounted) .. '/' .. string.format('%.0f', due) .. '|' .. state .. '|' .. key end
  if uncounted > 0 then return head .. '/' .. int_text(uncounted) .. '|' .. state .. '|' .. key end
  return head .. '|' .. state .. '|' .. key
end

-- The one message of a key in state 'q<seq>' (nil for any other state).
local function only_seq(state)
  if state and #state > 1 and string.byte(state, 1) == 113 --[[ 'q' ]] then return string.sub(state, 2) end
  return nil
end

-- A key's state in `key-states` (invariant 3 of SCHEMA.md): absent (idle), 'q' (queued),
-- 'q<seq>' (seq is its only message: queued, or outstanding when its keyed delivery says 's'),
-- '<n>' (busy: n outstanding messages, or the one being forwarded; more may wait behind them) or
-- '-<n>' (busy: its n outstanding messages are all it has, so their acknowledge leaves it idle
-- without reading its range).
-- -> how many are outstanding and whether they are all it has, for a key known to be busy (a
-- 'q<seq>' one is then busy with its only message); nil for a queued (or idle) key.
local function busy_count(state)
  if state == '-1' then return 1, true end -- the common state, without parsing a number
  local count = tonumber(state)
  if not count then
    if only_seq(state) then return 1, true end
    return nil, false
  end
  if count < 0 then return -count, true end
  return count, false
end

local function busy_state(outstanding, all)
  if all and outstanding == 1 then return '-1' end -- the common state, without a concatenation
  return all and '-' .. int_text(outstanding) or int_text(outstanding)
end

-- The state of a queued key whose range begins with `members` (its first two members, or all
-- it has): 'q<seq>' when seq is its only message, so that the pull that takes it reads no range.
local function queued_state(members)
  if #members == 1 then return 'q' .. keyed_member_seq(members[1]) end
  return 'q'
end

-- Makes a free key deliverable again: it goes to the ready list if it still has messages, or,
-- when `due` (µs) is given, to the delayed set until then (its head waits out a retry backoff).
-- keys: {keyed, states, ready, delayed}
local function release_key(keys, key, to_front, due)
  local min, max = key_range(key)
  local members = redis.call('ZRANGEBYLEX', keys.keyed, min, max, 'LIMIT', 0, 2)
  if #members == 0 then
    redis.call('HDEL', keys.states, key)
    return false
  end
  redis.call('HSET', keys.states, key, queued_state(members))
  if due then
    redis.call('ZADD', keys.delayed, due, 'k:' .. key)
  else
    redis.call(to_front and 'LPUSH' or 'RPUSH', keys.ready, 'k:' .. key)
  end
  return true
end

-- release_key for several keys, each to the back of the ready list, in the order given, with
-- one write of each structure. Returns true when any of them became deliverable.
local function release_keys(keys, list)
  local idle, queued, markers = {}, {}, {}
  for _, key in ipairs(list) do
    local min, max = key_range(key)
    local members = redis.call('ZRANGEBYLEX', keys.keyed, min, max, 'LIMIT', 0, 2)
    if #members == 0 then
      idle[#idle + 1] = key
    else
      queued[#queued + 1] = key
      queued[#queued + 1] = queued_state(members)
      markers[#markers + 1] = 'k:' .. key
    end
  end
  if #idle > 0 then redis.call('HDEL', keys.states, unpack(idle)) end
  if #markers == 0 then return false end
  redis.call('HSET', keys.states, unpack(queued))
  redis.call('RPUSH', keys.ready, unpack(markers))
  return true
end

-- The redelivery cascade: the outstanding delivery of `seq` ends, and every later outstanding
-- one of its key loses its lease and waits again, in order. Outstanding messages of a key always
-- form the front of its range, and at most one pull's worth (1000) of them exists. How the
-- delivery of `seq` ended:
--   'nack'     a delivery attempt: it waits out the retry backoff from now;
--   'expired'  a delivery attempt: it waits out the retry backoff from its deadline;
--   'release'  it never reached a client: undone (its generation goes back; see
--              modify-ack-deadline.lua).
-- A later delivery whose own lease had expired is an attempt too (and waits out its own
-- backoff); the others were only cut short, and count as uncounted.
-- keys: {keyed, deliveries, states, leased, ready, delayed}
-- Returns true when the key became deliverable (nothing of it is outstanding any more), now or
-- after its head's backoff.
local function revoke_from(keys, key, seq, ended, now, policy)
  local _, max = key_range(key)
  local later = redis.call('ZRANGEBYLEX', keys.keyed, '[' .. keyed_member(key, seq), max, 'LIMIT', 0, 1000)
  local revoked, head_due = 0, nil
  for i, member in ipairs(later) do
    local later_seq = keyed_member_seq(member)
    local info = redis.call('HGET', keys.deliveries, later_seq)
    if not info then break end
    local gen, state, _, uncounted = split_keyed_delivery(info)
    if not is_outstanding(state) then break end
    local lease = later_seq .. ':' .. gen
    local deadline = tonumber(redis.call('ZSCORE', keys.leased, lease)) or math.huge
    redis.call('ZREM', keys.leased, lease)
    local due
    if i == 1 and ended == 'release' then
      gen = gen - 1
    elseif i == 1 and ended == 'nack' then
      due = now + backoff_us(policy, attempts_of(gen) - uncounted)
    elseif deadline <= now then
      due = deadline + backoff_us(policy, attempts_of(gen) - uncounted)
    else
      uncounted = uncounted + 1
    end
    if due and due <= now then due = nil end
    if i == 1 then head_due = due end
    redis.call('HSET', keys.deliveries, later_seq, keyed_delivery(gen, 'w', key, uncounted, due))
    revoked = revoked + 1
  end
  local outstanding = busy_count(redis.call('HGET', keys.states, key)) - revoked
  if outstanding > 0 then
    -- The revoked ones wait behind those still outstanding: these are not all it has.
    redis.call('HSET', keys.states, key, outstanding)
    return false
  end
  return release_key(keys, key, true, head_due)
end

-- The strict check of leases about to be acknowledged together (modify-ack-deadline's hold,
-- acknowledge-and-publish), one code per member ("seq:gen") of members[first..]: DELIVERY_APPLIED
-- only when the lease is valid (expired counts as refused on any subscription) and, on an ordered
-- exactly-once subscription, would be acknowledged in order: each earlier message of its key is
-- acknowledged already or comes before it in `members` (acknowledge-ordered.lua).
-- keys: {leased, deliveries, keyed}
local function strict_lease_codes(keys, members, first, now, exactly_once)
  local codes = {}
  -- checked_of[key]: how many messages of the key come before this one, each in order.
  local checked_of = {}
  in_chunks(members, first, function(chunk)
    local deadlines = redis.call('ZMSCORE', keys.leased, unpack(chunk))
    for i, member in ipairs(chunk) do
      local code = RESULT[lease_status(deadlines[i], now, true)]
      local seq = split_entry(member)
      local info = code == DELIVERY_APPLIED and exactly_once and redis.call('HGET', keys.deliveries, seq)
      if info then
        local _, _, key = split_keyed_delivery(info)
        local min, max = key_range(key)
        local at = checked_of[key] or 0
        local expected = redis.call('ZRANGEBYLEX', keys.keyed, min, max, 'LIMIT', at, 1)[1]
        if expected == keyed_member(key, seq) then checked_of[key] = at + 1 else code = DELIVERY_OUT_OF_ORDER end
      end
      codes[#codes + 1] = code
    end
  end)
  return codes
end

-- ---- Control-plane records (put-topic, put-data-owner) ----
-- A name's stored state: its record JSON, else its tombstone JSON, else ''. Both carry a
-- `version`; copies of the control plane in several regions converge on the highest.
local function record_state(records_key, tombstones_key, name)
  return redis.call('HGET', records_key, name) or redis.call('HGET', tombstones_key, name) or ''
end

-- Whether a put of new_json (version new_version) may replace `current`:
--   'cas'    only if current is exactly `expected` (what the caller read and decided on);
--   'newer'  only if it has a higher version; at equal versions (two writes made through
--            different regions during a partition) the greater JSON wins, so every copy
--            settles on the same state whatever order the writes arrive in.
local function may_put(mode, expected, new_json, new_version, current)
  if mode == 'cas' then return current == expected end
  if current == '' then return true end
  local current_version = cjson.decode(current).version or 0
  if new_version ~= current_version then return new_version > current_version end
  return new_json > current
end

-- Whether a 'cas' put of a record (not a tombstone) creates its name: no live record holds it.
-- Only a create is held to the resource limits (src/broker/limits.ts); updates and copies never are.
local function creates_name(mode, is_tombstone, current)
  return mode == 'cas' and is_tombstone ~= '1' and (current == '' or cjson.decode(current).deleted == true)
end

-- Whether the names in `index_key` (a name index, score 0) that start with `prefix` already
-- number `limit` or more ('' = no limit). ZLEXCOUNT costs O(log N), whatever the count.
local function prefix_full(index_key, prefix, limit)
  if limit == '' then return false end
  return redis.call('ZLEXCOUNT', index_key, '[' .. prefix, '(' .. prefix .. '\255') >= tonumber(limit)
end
