--[[
  publish: stores a batch of messages once and fans it out to every attached subscription.
  KEYS[1]    topic state (HASH: block, used, attachVersion, deleted)
  KEYS[2]    prefix of the body block keys (see body_location in prelude.lua)
  KEYS[3]    body reference counts (HASH seq -> count, only while count > 1)
  KEYS[4]    the staging key: when ARGV holds no bodies, the broker wrote them here (HASH
             field -> body, with a TTL) just before this call (Scripts.runStaged)
  KEYS[5]    messages forwarded here from dead-letter policies (ZSET forward ID -> when stored)
  KEYS[6]    the retained log (ZSET block -> latest publish time in it, µs)
  KEYS[7]    the log's earliest publish times (ZSET block -> earliest publish time in it, µs)
  KEYS[8]    the remembered idempotency keys (HASH key -> the seq stored under it)
  KEYS[9]    when each remembered idempotency key was stored (ZSET key -> µs)
  KEYS[10]   the messages scheduled for later, while the topic retains (ZSET seq -> delivery
             time, µs; read by seek.lua)
  KEYS[11..] per attached subscription, in the order the caller read them: its ready list, its
             keyed ZSET and its key states (the two used when ordered), its selections
             (HASH block -> taken flags, written for a filtered subscription while the topic
             retains), its holds and hold blocks (see mark_holds in prelude.lua) and its keyed
             deliveries (used when ordered); when the publish schedules any message (s > 0), also
             its config (HASH retentionUs) and its delayed set: nine keys each, else seven
  ARGV[1]    time override in microseconds, or '' for Redis TIME
  ARGV[2]    the publish time (µs) the broker stamped into every body, from its reading of the
             one clock (PublishClock in src/broker/clock.ts); accepted from 10 s behind now to
             1 s ahead of it (a stamp trails by the time the call waited on its way here)
  ARGV[3]    attachVersion the caller read together with the attached subscriptions
  ARGV[4]    wake channel, published to (with how many new messages there are) when anyone is
             attached
  ARGV[5]    the request's ordering key ('' for none; one key per request)
  ARGV[6]    one character per attached subscription: '1' ordered, '0' not
  ARGV[7]    '' for a publish; for a message forwarded from a subscription's dead-letter policy,
             its forward ID (src/broker/dead-letters.ts): stored once, however often forwarded
  ARGV[8]    which messages each attached subscription takes, in order: '*' for all of them, or
             n characters, '1' taken and '0' not (its filter refused the message: the message
             counts as acknowledged for it from the start)
  ARGV[9]    the topic's messageRetentionDuration in µs, or '' when it has none
  ARGV[10]   the number of messages, n (at most SEQS_PER_BLOCK)
  ARGV[11]   the topic's deduplication window (µs): an idempotency key is remembered that long
  ARGV[12]   k, how many of the messages carry an idempotency key
  ARGV[13..] k pairs: the message's index (1 .. n) and its idempotency key. A key remembered
             within the window, or given to an earlier message of the same publish, makes its
             message a duplicate: nothing of it is stored, and its answer is the seq stored first.
  ARGV[13 + 2k]  r, how many runs of messages are scheduled for a later delivery
  ARGV[14 + 2k ..] r triples, in message order: the first and last index (1 .. n) of consecutive
             messages scheduled for one time, and that time (µs, after the publish time). A
             message whose time has not come when it is stored waits in each subscription's
             delayed set until then (keyed: with its time in its keyed delivery, holding back
             the later messages of its key; unkeyed, a run of them as one entry
             "<first seq>-<last seq>", counted in the config's inRuns); a time within the
             publish time plus the retention of every subscription that takes it (or the
             topic's, when longer), else nothing is stored.
  ARGV[14 + 2k + 3r ..] either nothing (the bodies are staged in KEYS[4], fields '000', '001', ...) or
             the bodies inline, in order (small publishes). A body as stored: the
             stamp's 16 digits, then what the broker packs (see src/broker/message-codec.ts).
             Small publishes come inline; large ones are staged, because every byte a script
             is handed costs Redis a pass (it builds a Lua string of each argument), while a
             staged hash becomes the block by RENAME, without its bytes being read.
  Returns    {REPLY_OK, firstSeq, nowUs, i1, seq1, ...}
                                              stored, seqs firstSeq .. firstSeq + n - 1, but
                                              message i1 (a duplicate) was stored before as seq1, ...
             {REPLY_TOPIC_DELETED}            the topic incarnation was deleted
             {REPLY_ATTACHMENTS_CHANGED}      attachments changed: re-read them and retry
             {REPLY_STAMP_REFUSED, nowUs}     the stamp is too far from now: stamp again from nowUs
                                              and retry
             {REPLY_FORWARDED_BEFORE}         that forward ID was stored already
             {REPLY_PAST_RETENTION, i, limitUs} message i is scheduled more than limitUs after its
                                              publish time, the retention of a subscription
                                              that takes it
             an error "the staged bodies are not all there" (matched in src/redis/calls/publish.ts)
             On every answer but {REPLY_OK, ...} nothing was written, and a staging key is deleted.
  Invariant: every subscription attached at publish time holds each new seq it takes exactly once
             (in its ready list, or for an ordered one with a key, in its keyed ZSET with the key
             queued or busy; with its flag set in its holds), and the body is kept while any of them holds it: a body nobody
             takes is not kept at all. Every stored publish
             time is within [now - 10 s, now + 1 s] of the one clock when it was stored. Seqs
             grow with every publish, and a field of a block is written once: a body is never
             overwritten. A forward ID is stored at most once while its mark is kept
             (FORWARD_MARK_KEPT_US). While the topic retains (its own retention, or a
             subscription's retainAckedMessages: the state's retainUs), every stored message
             holds one more reference, the log's, and goes into a block of the log; a block is in
             the log only if every message of it holds that reference (expire-log releases them).
             An idempotency key names one stored message while it is remembered: within the
             window, no publish stores another under it. Remembering is bounded: each call forgets
             at least as many expired keys as it adds, and both keys expire a window after the
             last call that added one. A scheduled message is delivered by no subscription
             before its delivery time (judged by the clock of the pull script), and while it is
             ahead and the topic retains, the scheduled set names it; each call that adds to
             that set forgets up to twice as many past entries as it adds, and the set expires
             after its latest time.
]]
local state_key, bodies_prefix, refs_key, staging_key, forwarded_key, log_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- A forward ID's mark outlives by far any forwarder still at work on it (src/broker/dead-letters.ts).
local FORWARD_MARK_KEPT_US = 24 * 3600 * 1000000
local count = tonumber(ARGV[10])
local dedup_window, keyed_messages = tonumber(ARGV[11]), tonumber(ARGV[12])
local SCHEDULED_ARG = 13 + 2 * keyed_messages
local scheduled_runs = tonumber(ARGV[SCHEDULED_ARG])
local FIRST_BODY_ARG = SCHEDULED_ARG + 1 + 3 * scheduled_runs
local staged = #ARGV < FIRST_BODY_ARG
if staged and redis.call('HLEN', staging_key) ~= count then
  return redis.error_reply('publish: the staged bodies are not all there')
end
if not staged and #ARGV - FIRST_BODY_ARG + 1 ~= count then
  return redis.error_reply('publish: ARGV does not hold the message count of bodies')
end
local function discard_staging()
  if staged then redis.call('DEL', staging_key) end
end
local function refuse(reply)
  discard_staging()
  return reply
end

local now = now_us(ARGV[1])
local state = redis.call('HMGET', state_key, 'deleted', 'attachVersion', 'block', 'used', 'retainUs', 'logBlock')
if state[1] then return refuse({REPLY_TOPIC_DELETED}) end
if (state[2] or '0') ~= ARGV[3] then return refuse({REPLY_ATTACHMENTS_CHANGED}) end
local stamp = tonumber(ARGV[2])
if not stamp or stamp < now - STAMP_MAX_BEHIND_US or stamp > now + STAMP_MAX_AHEAD_US then
  return refuse({REPLY_STAMP_REFUSED, now})
end

-- The keys of subscription s: KEYS_PER_SUBSCRIPTION from sub_key(s, 1).
local KEYS_PER_SUBSCRIPTION = scheduled_runs > 0 and 9 or 7
local subscriptions = (#KEYS - 10) / KEYS_PER_SUBSCRIPTION
local function sub_key(s, i) return KEYS[10 + KEYS_PER_SUBSCRIPTION * (s - 1) + i] end
-- The topic's own retention keeps every message, taken or not; retainAckedMessages keeps those
-- of the subscriptions.
local topic_retention = tonumber(ARGV[9]) or 0
local logging = math.max(topic_retention, tonumber(state[5] or '0')) > 0

-- takes[s]: false when subscription s takes every message, else its string of '1'/'0';
-- holders[i]: how many subscriptions take message i.
local takes, holders, selections, at = {}, {}, ARGV[8], 1
local filtered = false
for s = 1, subscriptions do
  if string.sub(selections, at, at) == '*' then
    takes[s], at = false, at + 1
  else
    takes[s], at, filtered = string.sub(selections, at, at + count - 1), at + count, true
  end
end
if at ~= #selections + 1 then
  return refuse(redis.error_reply('publish: ARGV[8] does not give one selection per subscription'))
end

-- runs[j]: {first, last, time}: messages first .. last are to be delivered at time. A subscription
-- taking one must keep it until then: pull drops what is older than its retention (or the
-- topic's). ahead: the runs whose time has not come (in message order).
local runs, ahead = {}, {}
for j = 1, scheduled_runs do
  local at = SCHEDULED_ARG + 3 * j - 2
  local run = { tonumber(ARGV[at]), tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]) }
  runs[j] = run
  if run[3] > now then ahead[#ahead + 1] = run end
end
for s = 1, scheduled_runs > 0 and subscriptions or 0 do
  local retention = tonumber(redis.call('HGET', sub_key(s, 8), 'retentionUs') or '')
  local limit = retention and math.max(retention, topic_retention)
  for _, run in ipairs(retention and runs or {}) do
    if run[3] - stamp > limit then
      for i = run[1], run[2] do
        if not takes[s] or string.byte(takes[s], i) == 49 then return refuse({REPLY_PAST_RETENTION, i, limit}) end
      end
    end
  end
end
-- due[i]: when message i is to be delivered, of those whose time has not come (filled on need).
local due
local function due_of(i)
  if not due then
    due = {}
    for _, run in ipairs(ahead) do
      for j = run[1], run[2] do due[j] = run[3] end
    end
  end
  return due[i]
end

-- Idempotency keys: duplicate[i] is the seq a remembered key names, or for a key given twice in
-- this publish, the index of its first message (resolved once seqs are known). A duplicate is
-- taken by no subscription and stored nowhere.
local idempotency_key, idempotency_times = KEYS[8], KEYS[9]
local duplicate, new_keys, duplicates = {}, {}, 0
if keyed_messages > 0 then
  local remembered_since = now - dedup_window
  local expired = redis.call('ZRANGEBYSCORE', idempotency_times, '-inf', '(' .. string.format('%.0f', remembered_since), 'LIMIT', 0, 2 * keyed_messages)
  if #expired > 0 then
    redis.call('ZREM', idempotency_times, unpack(expired))
    redis.call('HDEL', idempotency_key, unpack(expired))
  end
  -- What each key names and when it was stored, in one read of each (not two calls per key).
  local given = {}
  for j = 1, keyed_messages do given[j] = ARGV[12 + 2 * j] end
  local stored_at = redis.call('ZMSCORE', idempotency_times, unpack(given))
  local originals = redis.call('HMGET', idempotency_key, unpack(given))
  local first_of = {}
  for j = 1, keyed_messages do
    local i, key = tonumber(ARGV[11 + 2 * j]), given[j]
    local original = stored_at[j] and tonumber(stored_at[j]) >= remembered_since and originals[j]
    if original then
      duplicate[i], duplicates = original, duplicates + 1
    elseif first_of[key] then
      duplicate[i], duplicates = first_of[key], duplicates + 1
    else
      first_of[key] = i
      new_keys[#new_keys + 1] = { i, key }
    end
  end
end
if duplicates > 0 then
  -- Every subscription takes the new messages only (the filtered path: a '0' per duplicate).
  for s = 1, subscriptions do
    local flags = {}
    for i = 1, count do
      local taken_by_filter = not takes[s] or string.byte(takes[s], i) == 49
      flags[i] = (taken_by_filter and not duplicate[i]) and '1' or '0'
    end
    takes[s] = table.concat(flags)
  end
  filtered = true
end
local forward_id = ARGV[7]
if forward_id ~= '' then
  if redis.call('ZSCORE', forwarded_key, forward_id) then return refuse({REPLY_FORWARDED_BEFORE}) end
  redis.call('ZREMRANGEBYSCORE', forwarded_key, '-inf', now - FORWARD_MARK_KEPT_US)
  redis.call('ZADD', forwarded_key, now, forward_id)
end

-- Seqs only grow (ordered delivery relies on it): a publish goes into the latest block when it
-- is small and fits there, else into a new one. A staged publish takes a new block whole (its
-- hash becomes the block) and leaves it full. A block is either in the log or not, whole: when
-- the topic starts or stops retaining, the next publish starts a new block.
local ordering_key, ordered_flags = ARGV[5], ARGV[6]
local block, first_field = tonumber(state[3] or '0'), tonumber(state[4] or SEQS_PER_BLOCK)
local logged_block = state[6] == string.format('%d', block)
if staged or first_field + count > SEQS_PER_BLOCK or logging ~= logged_block then block, first_field = block + 1, 0 end
redis.call('HSET', state_key, 'block', block, 'used', staged and SEQS_PER_BLOCK or first_field + count)
local first_seq = block * SEQS_PER_BLOCK + first_field
-- holders[i]: the references message i starts with: one per subscription that takes it and,
-- while the topic retains, the log's (only the topic's own retention keeps what nobody takes).
local kept = 0
for i = 1, count do
  local n = subscriptions
  if filtered then
    n = 0
    for s = 1, subscriptions do
      if not takes[s] or string.byte(takes[s], i) == 49 then n = n + 1 end
    end
  end
  if logging and (n > 0 or topic_retention > 0) and not duplicate[i] then n = n + 1 end
  holders[i] = n
  if n > 0 then kept = kept + 1 end
end

-- The answer, and the new idempotency keys remembered under their seqs.
local reply = {REPLY_OK, first_seq, now}
for i = 1, count do
  local original = duplicate[i]
  if original then
    reply[#reply + 1] = i
    reply[#reply + 1] = type(original) == 'number' and string.format('%d', first_seq + original - 1) or original
  end
end
if #new_keys > 0 then
  local seq_of, stored_at = {}, {}
  for j, entry in ipairs(new_keys) do
    seq_of[2 * j - 1], seq_of[2 * j] = entry[2], string.format('%d', first_seq + entry[1] - 1)
    stored_at[2 * j - 1], stored_at[2 * j] = now, entry[2]
  end
  redis.call('HSET', idempotency_key, unpack(seq_of))
  redis.call('ZADD', idempotency_times, unpack(stored_at))
  local kept_ms = math.ceil(dedup_window / 1000)
  redis.call('PEXPIRE', idempotency_key, kept_ms)
  redis.call('PEXPIRE', idempotency_times, kept_ms)
end

if kept == 0 then -- nobody to deliver to: nothing is stored
  discard_staging()
  return reply
end

local block_key = bodies_prefix .. string.format('%d', block)
local seqs = {}
for i = 1, count do seqs[i] = string.format('%d', first_seq + i - 1) end
if staged then
  redis.call('RENAME', staging_key, block_key)
  redis.call('PERSIST', block_key)
  if kept < count then
    local unkept = {}
    for i = 1, count do
      if holders[i] == 0 then unkept[#unkept + 1] = string.format('%03d', first_field + i - 1) end
    end
    redis.call('HDEL', block_key, unpack(unkept))
  end
else
  local fields = {}
  for i = 1, count do
    if holders[i] > 0 then
      fields[#fields + 1] = string.format('%03d', first_field + i - 1)
      fields[#fields + 1] = ARGV[FIRST_BODY_ARG + i - 1]
    end
  end
  redis.call('HSET', block_key, unpack(fields))
end
local refs = {}
for i = 1, count do
  if holders[i] > 1 then
    refs[#refs + 1] = seqs[i]
    refs[#refs + 1] = holders[i]
  end
end
if #refs > 0 then redis.call('HSET', refs_key, unpack(refs)) end
-- The stored messages whose time has not come: while the topic retains, the scheduled set names
-- them too: a seek may then bring one back to a subscription that never held it (one created
-- later, or to a snapshot), and leaves it waiting (seek.lua). Otherwise a seek only rearranges
-- what a subscription holds, whose own delayed set or keyed delivery has the time.
local waiting = {}
for _, run in ipairs(logging and ahead or {}) do
  for i = run[1], run[2] do
    if holders[i] > 0 then
      waiting[#waiting + 1] = run[3]
      waiting[#waiting + 1] = seqs[i]
    end
  end
end
if #waiting > 0 then
  local scheduled_key = KEYS[10]
  local past = redis.call('ZRANGEBYSCORE', scheduled_key, '-inf', now, 'LIMIT', 0, #waiting)
  if #past > 0 then redis.call('ZREM', scheduled_key, unpack(past)) end
  redis.call('ZADD', scheduled_key, unpack(waiting))
  local latest = redis.call('ZRANGE', scheduled_key, -1, -1, 'WITHSCORES')
  local kept_ms = math.ceil((tonumber(latest[2]) - now) / 1000) + 1000
  if redis.call('PTTL', scheduled_key) < kept_ms then redis.call('PEXPIRE', scheduled_key, kept_ms) end
end
if logging then
  local block_id = string.format('%d', block)
  redis.call('HSET', state_key, 'logBlock', block_id)
  redis.call('ZADD', log_key, 'GT', stamp, block_id)
  redis.call('ZADD', KEYS[7], 'LT', stamp, block_id)
end

-- The seqs subscription s takes (all of them, shared, unless it filters).
local function taken(s)
  if not takes[s] then return seqs end
  local mine = {}
  for i = 1, count do
    if string.byte(takes[s], i) == 49 then mine[#mine + 1] = seqs[i] end
  end
  return mine
end

local function keyed_members(taken_seqs)
  local members = {}
  for i, seq in ipairs(taken_seqs) do
    members[2 * i - 1] = 0
    members[2 * i] = keyed_member(ordering_key, seq)
  end
  return members
end

local members_of_all -- the keyed members of every message, shared by the ordered subscriptions that take all
-- Of the seqs a subscription takes, the scheduled ones whose time has not come wait: keyed, with
-- their time in their keyed delivery; else in its delayed set, consecutive seqs of one time as one
-- run entry "<first>-<last>" (a member per message would cost Redis a sorted-set insert each),
-- counted in its config's inRuns. The others are returned.
local function hold_back(s, mine, keyed)
  if #ahead == 0 then return mine end
  local held, now_ready, in_runs = {}, {}, 0
  local function wait_run(first, last, time)
    held[#held + 1] = time
    held[#held + 1] = first == last and seqs[first] or (seqs[first] .. '-' .. seqs[last])
    in_runs = in_runs + last - first
  end
  if not keyed and not takes[s] then
    -- It takes every message: each run ahead waits whole, the messages between them are ready.
    local next_i = 1
    for _, run in ipairs(ahead) do
      for i = next_i, run[1] - 1 do now_ready[#now_ready + 1] = seqs[i] end
      wait_run(run[1], run[2], run[3])
      next_i = run[2] + 1
    end
    for i = next_i, count do now_ready[#now_ready + 1] = seqs[i] end
  else
    local run_first, run_last, run_time
    for _, seq in ipairs(mine) do
      local i = seq - first_seq + 1
      local time = due_of(i)
      if time and keyed then
        held[#held + 1] = seq
        held[#held + 1] = keyed_delivery(0, 'w', ordering_key, 0, time)
      elseif time and run_first and run_last == i - 1 and run_time == time then
        run_last = i
      else
        if run_first then wait_run(run_first, run_last, run_time) end
        run_first = nil
        if time then
          run_first, run_last, run_time = i, i, time
        else
          now_ready[#now_ready + 1] = seq
        end
      end
    end
    if run_first then wait_run(run_first, run_last, run_time) end
  end
  if #held > 0 then redis.call(keyed and 'HSET' or 'ZADD', sub_key(s, keyed and 7 or 9), unpack(held)) end
  if in_runs > 0 then redis.call('HINCRBY', sub_key(s, 8), 'inRuns', in_runs) end
  return now_ready
end

for s = 1, subscriptions do
  local ready_key, keyed_key, key_states_key = sub_key(s, 1), sub_key(s, 2), sub_key(s, 3)
  local mine = taken(s)
  local holds = { flags = sub_key(s, 5), blocks = sub_key(s, 6) }
  if not takes[s] then
    hold_run(holds, first_seq, count)
  elseif #mine > 0 then
    mark_holds(holds, mine, '1')
  end
  if logging and takes[s] then
    -- Which messages of the block it took, for a seek back to them (seek.lua).
    local selections_key, block_id = sub_key(s, 4), string.format('%d', block)
    local flags = redis.call('HGET', selections_key, block_id) or string.rep('1', SEQS_PER_BLOCK)
    flags = string.sub(flags, 1, first_field) .. takes[s] .. string.sub(flags, first_field + count + 1)
    redis.call('HSET', selections_key, block_id, flags)
  end
  if #mine > 0 and ordering_key ~= '' and string.sub(ordered_flags, s, s) == '1' then
    hold_back(s, mine, true)
    local members
    if takes[s] then
      members = keyed_members(mine)
    else
      members_of_all = members_of_all or keyed_members(seqs)
      members = members_of_all
    end
    redis.call('ZADD', keyed_key, unpack(members))
    -- An idle key is queued, naming its message when it has only one (pull then reads no
    -- range); a key whose state says what all its messages are says so no longer.
    if redis.call('HSETNX', key_states_key, ordering_key, #mine == 1 and 'q' .. mine[1] or 'q') == 1 then
      redis.call('RPUSH', ready_key, 'k:' .. ordering_key)
    else
      local state = redis.call('HGET', key_states_key, ordering_key)
      local only = only_seq(state)
      if only then
        -- Its only message is queued, or leased ('s'): then the key is busy with that one, which
        -- is no longer all it has.
        local deliveries_key = sub_key(s, 7)
        local info = redis.call('HGET', deliveries_key, only)
        local gen, delivery_state, _, uncounted, due
        if info then gen, delivery_state, _, uncounted, due = split_keyed_delivery(info) end
        if delivery_state == 's' then
          redis.call('HSET', deliveries_key, only, keyed_delivery(gen, 'o', ordering_key, uncounted, due))
          redis.call('HSET', key_states_key, ordering_key, 1)
        else
          redis.call('HSET', key_states_key, ordering_key, 'q')
        end
      else
        local outstanding, all = busy_count(state)
        if all then redis.call('HSET', key_states_key, ordering_key, outstanding) end
      end
    end
  elseif #mine > 0 then
    local now_ready = hold_back(s, mine, false)
    if #now_ready > 0 then redis.call('RPUSH', ready_key, unpack(now_ready)) end
  end
end
wake(ARGV[4], count - duplicates)
return reply
