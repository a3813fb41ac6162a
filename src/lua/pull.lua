--[[
  pull: leases up to N available messages of one subscription. Messages without an ordering key
  (every message of a subscription without ordering) go out as they come; on an ordered
  subscription the messages of one key go out in publish order, consecutive ones together, and
  only while nothing of that key is outstanding. A message whose delivery failed as often as its
  dead-letter policy allows is handed to the caller to forward instead (step 1 of forwarding,
  src/broker/dead-letters.ts): it moves to the forwarding set, claimed by this caller for a while;
  a claim that ran out (its forwarder stopped) is taken over by the next pull.
  KEYS[1]    subscription config (HASH ackDeadlineUs, retentionUs, minBackoffUs, maxBackoffUs,
             maxDeliveryAttempts, ...)
  KEYS[2]    ready list (LIST of "seq" | "seq:gen" for unkeyed messages, "k:<key>" for keys)
  KEYS[3]    leases (ZSET "seq:gen" -> deadline in microseconds)
  KEYS[4]    prefix of the body block keys (see body_location; only sizes are read here)
  KEYS[5]    keyed ZSET (un-acked keyed messages, by key then seq; empty without ordering)
  KEYS[6]    keyed deliveries (HASH seq -> "gen|o|key" | "gen|s|key" | "gen|w|key" | "gen|f|key";
             empty without ordering)
  KEYS[7]    key states (HASH key -> "q" | "q<seq>" | outstanding count, "-<count>" when those
             are all of the key's messages; empty without ordering)
  KEYS[8]    delayed (ZSET ready-list entry -> when its retry backoff ends, or a message
             scheduled for later is due, µs)
  KEYS[9]    forwarding (ZSET "seq:gen" -> until when its forwarder's claim holds, µs)
  KEYS[10]   holds (HASH block -> held flags; see mark_holds in prelude.lua): a message whose
             body is gone is dropped from them too
  KEYS[11]   hold blocks (ZSET block -> block)
  ARGV[1]    time override in microseconds, or ''
  ARGV[2]    maximum number of messages (a message handed over to forward counts as one)
  ARGV[3]    lease length in microseconds, or '' for the subscription's ack deadline
  ARGV[4]    wake channel (published to when an expired key becomes deliverable)
  ARGV[5]    byte budget: no further message once the leased bodies reach it (at least one goes)
  ARGV[6]    '1': messages may be handed over to forward now (the dead-letter topic exists),
             else '': they are delivered again instead
  ARGV[7]    the topic's messageRetentionDuration in µs, or '' when it has none: messages are
             kept for the longer of it and the subscription's retention
  ARGV[8]    version of the caller's subscription record, or '' (see newer_settings in prelude.lua)
  ARGV[9]    leased bodies of at most this many bytes in all come back in the reply (when no
             message is handed over to forward)
  Returns    {REPLY_OK, nextDueUs, oldestKeptUs, forwards, stride, claimEndUs, expired, inlined,
              seq1, gen1[, attempt1], ..., fseq1, fgen1, fcount1, ..., body1, ...}
             nextDueUs: when nothing was leased, microseconds until the earliest lease
             deadline, backoff end or forwarding claim's end ('' if there is none), so the
             caller knows when to look again (0 when messages were handed over to forward)
             oldestKeptUs: messages published before it are past the subscription's retention
             (or the topic's, when longer)
             forwards: how many messages were handed over to forward (the last triples: seq,
             gen, and how many delivery attempts failed); the caller forwards each and then
             runs finish-forwarding, or cancel-forwarding when it cannot
             stride: 3 on subscriptions with a dead-letter policy (each leased message comes
             with its delivery attempt), else 2
             claimEndUs: until when this caller's claim on the forwards holds (cancel-forwarding
             gives back only a claim of that end)
             expired: how many leases this call found past their deadline (Pub/Sub's expired ack
             deadlines; a keyed lease the cascade of an earlier one revoked is not counted)
             inlined: how many bodies end the reply: those of the leased messages, in order
             (ARGV[9]), or 0
             {REPLY_NO_SUBSCRIPTION}   the subscription does not exist (deleted, or never attached),
                                       or its settings come from a newer record than ARGV[8]
             Larger bodies are not returned: a body read into Lua is copied into a Lua string and
             again into the reply, so the caller reads them with HMGET, which copies them once.
             Small ones are, saving the caller that round trip.
  Invariant: a message is leased to at most one delivery (generation) at a time, and only
             messages whose body is stored are leased. Messages older than the retention are
             never delivered: the caller acknowledges those instead (src/broker/pull.ts,
             pullFrom), which drops them. For each key, at most one
             pull holds outstanding messages, and they are the key's oldest un-acked messages in
             order; an expired lease of a key sends that message and every later outstanding one
             of the key back, in order, before anything newer. With a retry policy, nothing is
             delivered again before its backoff ends (from its nack, or its lease's deadline),
             and a key waits for the backoff of its oldest message. No message scheduled for
             later is delivered before its delivery time, and a key waits for its oldest
             message's. A message due for its
             dead-letter topic is never delivered again while it may be forwarded; a key's
             message is handed over only as the key's oldest, and the key waits until it is
             forwarded.
]]
local config_key, ready_key, leased_key, bodies_prefix = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local keys = {
  keyed = KEYS[5], deliveries = KEYS[6], states = KEYS[7], leased = leased_key, ready = ready_key, delayed = KEYS[8],
}
local forwarding_key = KEYS[9]
local now = now_us(ARGV[1])
local remaining = tonumber(ARGV[2])
local config = redis.call(
  'HMGET', config_key, 'ackDeadlineUs', 'retentionUs', 'minBackoffUs', 'maxBackoffUs', 'maxDeliveryAttempts'
)
if not config[1] or newer_settings(config_key, ARGV[8]) then return {REPLY_NO_SUBSCRIPTION} end
mark_active(config_key, now)
local policy = redelivery_policy(config[3], config[4], config[5])
local may_forward = ARGV[6] == '1'
local with_attempts = policy ~= nil and policy.limit ~= nil
local deadline = now + tonumber(ARGV[3] ~= '' and ARGV[3] or config[1])
local oldest_kept = now - math.max(tonumber(config[2]), tonumber(ARGV[7]) or 0)
-- How long a forwarder's claim on a message it forwards holds: then the next pull takes an
-- unfinished forward over, with a claim of its own.
local FORWARD_CLAIM_US = 30000000
local claim_end = now + FORWARD_CLAIM_US
-- Scores go to ZADD as text: a number would be formatted once per message.
local deadline_text, claim_end_text = string.format('%.0f', deadline), string.format('%.0f', claim_end)
local out = {REPLY_OK, '', oldest_kept, 0, with_attempts and 3 or 2, claim_end, 0, 0}
-- bodiless: the messages dropped because their body is gone.
local leases, forwards, claims, bodiless = {}, {}, {}, {}
local bytes, max_bytes = 0, tonumber(ARGV[5])
local function has_room() return remaining > 0 and bytes < max_bytes end

-- Bodies are read here only when they are small (see ARGV[9]): first their sizes, for the byte
-- budget. A size of 0 means the body is gone.
local function stored_size(seq)
  return redis.call('HSTRLEN', body_location(bodies_prefix, seq))
end

-- A new delivery (generation gen) of seq, its delivery attempt-th.
local function lease(seq, gen, size, attempt)
  leases[#leases + 1] = deadline_text
  leases[#leases + 1] = seq .. ':' .. int_text(gen)
  out[#out + 1] = seq
  out[#out + 1] = gen
  if with_attempts then out[#out + 1] = attempt end
  remaining = remaining - 1
  bytes = bytes + size
end

-- Hands a message over to forward (or, a claim that ran out, again): claimed until then.
local function forward(seq, gen, failed)
  claims[#claims + 1] = claim_end_text
  claims[#claims + 1] = seq .. ':' .. int_text(gen)
  forwards[#forwards + 1] = seq
  forwards[#forwards + 1] = gen
  forwards[#forwards + 1] = failed
  remaining = remaining - 1
end

-- An unkeyed message's delivery attempts are its generation's (attempts_of).
local function deliver_unkeyed(entry)
  local seq, gen = split_entry(entry)
  local size = stored_size(seq)
  if size == 0 then
    bodiless[#bodiless + 1] = seq
    return
  end
  local attempts = attempts_of(gen)
  if may_forward and dead_letters(policy, attempts) then
    forward(seq, gen, attempts)
  else
    lease(seq, gen + 1, size, attempts + 1)
  end
end

-- The writes of the keys served by one batch of popped entries (serve_key), made together
-- once the batch is served: keyed deliveries (seq, delivery, ...) and busy keys' outstanding
-- counts (key, count, ...).
local delivered, busy = {}, {}
local function write_served_keys()
  if #delivered > 0 then redis.call('HSET', keys.deliveries, unpack(delivered)) end
  if #busy > 0 then redis.call('HSET', keys.states, unpack(busy)) end
  delivered, busy = {}, {}
end

-- Leases the key's oldest messages (it has nothing outstanding when its marker is popped), up to
-- the first one still waiting out a backoff or for its delivery time: the `count` seqs from
-- seqs[at] on are the first of its range (`whole`: all of it), infos[at], ... their keyed
-- deliveries (read for the whole batch): they are distinct messages, so nothing read there
-- changes before it is used here. `sole`: the key's state names its only message ('q<seq>');
-- leased, that message says so ('s') and the state stays, so that its acknowledge leaves the key
-- idle without reading the state, and this pull writes none.
local function serve_key(key, count, whole, seqs, infos, at, sole)
  local outstanding, waits_until = 0, nil
  local gone, gone_seqs -- made only for a key with messages whose body is gone
  for i = at, at + count - 1 do
    if not has_room() then -- the rest of the key waits until these are acked
      whole = false
      break
    end
    local seq = seqs[i]
    local gen, uncounted, due = 0, 0, nil
    local info = infos[i]
    if info then
      local info_gen, _, _, info_uncounted, info_due = split_keyed_delivery(info)
      gen, uncounted, due = info_gen, info_uncounted, info_due
    end
    if due and due > now then
      waits_until, whole = due, false
      break
    end
    local size = stored_size(seq)
    local attempts = attempts_of(gen) - uncounted
    if size > 0 and may_forward and dead_letters(policy, attempts) then
      -- Only the key's oldest message is forwarded; the key waits until it is.
      if outstanding == 0 then
        delivered[#delivered + 1] = seq
        delivered[#delivered + 1] = keyed_delivery(gen, 'f', key, uncounted)
        forward(seq, gen, attempts)
        outstanding = 1
      end
      whole = false -- a key being forwarded keeps a count that finish-forwarding decrements
      break
    elseif size > 0 then
      delivered[#delivered + 1] = seq
      delivered[#delivered + 1] = keyed_delivery(gen + 1, sole and 's' or 'o', key, uncounted)
      lease(seq, gen + 1, size, attempts + 1)
      outstanding = outstanding + 1
    else
      gone, gone_seqs = gone or {}, gone_seqs or {}
      gone[#gone + 1] = keyed_member(key, seq)
      gone_seqs[#gone_seqs + 1] = seq
    end
  end
  if gone then
    redis.call('ZREM', keys.keyed, unpack(gone))
    redis.call('HDEL', keys.deliveries, unpack(gone_seqs))
    for _, seq in ipairs(gone_seqs) do bodiless[#bodiless + 1] = seq end
  end
  if outstanding > 0 then
    if not (sole and whole) then -- else a lease of its only message: the state stays 'q<seq>'
      busy[#busy + 1] = key
      busy[#busy + 1] = busy_state(outstanding, whole)
    end
  else
    release_key(keys, key, false, waits_until)
  end
end

-- Serves entries popped from the front of the ready list, in order. A key may take several
-- slots: its oldest messages are read first, for the entries up to the one whose messages make
-- `remaining` (what an earlier key cannot take yet leaves room to the later ones): the states of
-- all the keys in one read, then one range per key, unless its state names its only message;
-- then the keyed deliveries of all of them in one read. What is not served goes back in front,
-- in order.
local function serve(entries)
  local key_of, marked, keyed_count = {}, {}, 0
  for i, entry in ipairs(entries) do
    if is_key_marker(entry) then
      local key = string.sub(entry, 3)
      key_of[i] = key
      keyed_count = keyed_count + 1
      marked[keyed_count] = key
    end
  end
  local states, states_read = {}, 0
  in_chunks(marked, 1, function(chunk)
    for _, state in ipairs(redis.call('HMGET', keys.states, unpack(chunk))) do
      states_read = states_read + 1
      states[states_read] = state
    end
  end)
  -- Entry i's key has count_of[i] seqs from seqs[first_of[i]] on (whole_of[i]: all of them;
  -- sole_of[i]: its state names the one).
  local count_of, whole_of, sole_of, seqs, first_of, seq_count = {}, {}, {}, {}, {}, 0
  local wanted, taken, keyed_at = 0, #entries, 0
  for i = 1, #entries do
    if wanted >= remaining then
      taken = i - 1
      break
    end
    local key = key_of[i]
    if key then
      keyed_at = keyed_at + 1
      first_of[i] = seq_count + 1
      local only = only_seq(states[keyed_at])
      if only then
        seq_count = seq_count + 1
        seqs[seq_count] = only
        count_of[i], whole_of[i], sole_of[i] = 1, true, true
      else
        local min, max = key_range(key)
        local members = redis.call('ZRANGEBYLEX', keys.keyed, min, max, 'LIMIT', 0, remaining)
        for _, member in ipairs(members) do
          seq_count = seq_count + 1
          seqs[seq_count] = keyed_member_seq(member)
        end
        count_of[i], whole_of[i] = #members, #members < remaining
      end
      wanted = wanted + count_of[i]
    else
      wanted = wanted + 1
    end
  end
  local infos = {}
  in_chunks(seqs, 1, function(chunk)
    for _, info in ipairs(redis.call('HMGET', keys.deliveries, unpack(chunk))) do infos[#infos + 1] = info end
  end)
  for i = 1, taken do
    if not has_room() then
      taken = i - 1
      break
    end
    if key_of[i] then
      serve_key(key_of[i], count_of[i], whole_of[i], seqs, infos, first_of[i], sole_of[i])
    else
      deliver_unkeyed(entries[i])
    end
  end
  write_served_keys()
  -- LPUSH puts its last argument at the front: the first one not served goes last.
  local unserved = {}
  for i = #entries, taken + 1, -1 do unserved[#unserved + 1] = entries[i] end
  in_chunks(unserved, 1, function(chunk) redis.call('LPUSH', ready_key, unpack(chunk)) end)
end

-- Forwards whose claim ran out (their forwarder stopped before finishing) are handed over again.
local unfinished = redis.call('ZRANGEBYSCORE', forwarding_key, '-inf', now, 'LIMIT', 0, remaining)
for _, member in ipairs(unfinished) do
  local seq, gen = split_entry(member)
  local info = redis.call('HGET', keys.deliveries, seq)
  local uncounted = info and select(4, split_keyed_delivery(info)) or 0
  forward(seq, gen, attempts_of(gen) - uncounted)
end

-- Work whose backoff has ended, and scheduled messages whose time has come (a run taken apart),
-- go to the front of the ready list, the earliest first: entries until they make `remaining`.
local backed_off = redis.call('ZRANGEBYSCORE', keys.delayed, '-inf', now, 'LIMIT', 0, remaining)
if #backed_off > 0 then
  local taken, due_now, in_runs = {}, {}, 0
  local function add(entry) due_now[#due_now + 1] = entry end
  for _, entry in ipairs(backed_off) do
    if #due_now >= remaining then break end
    taken[#taken + 1] = entry
    local before = #due_now
    each_entry(entry, add)
    in_runs = in_runs + #due_now - before - 1
  end
  redis.call('ZREM', keys.delayed, unpack(taken))
  if in_runs > 0 then redis.call('HINCRBY', config_key, 'inRuns', -in_runs) end
  -- LPUSH puts its last argument at the front: the earliest goes last.
  local earliest_last = {}
  for i = #due_now, 1, -1 do earliest_last[#earliest_last + 1] = due_now[i] end
  in_chunks(earliest_last, 1, function(chunk) redis.call('LPUSH', ready_key, unpack(chunk)) end)
end

-- Expired leases next. Unkeyed ones are delivered again right here, or after their backoff;
-- keyed ones cascade.
local woke = false
local expired = redis.call('ZRANGEBYSCORE', leased_key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, remaining)
for i = 1, #expired, 2 do
  local member, deadline = expired[i], tonumber(expired[i + 1])
  local seq, gen = split_entry(member)
  local info = redis.call('HGET', keys.deliveries, seq)
  if not info then
    out[7] = out[7] + 1
    redis.call('ZREM', leased_key, member)
    local available_at = deadline + backoff_us(policy, attempts_of(gen))
    if available_at > now then
      redis.call('ZADD', keys.delayed, available_at, member)
    elseif has_room() then
      deliver_unkeyed(member)
    else
      redis.call('LPUSH', ready_key, member)
    end
  elseif redis.call('ZSCORE', leased_key, member) then -- not revoked by an earlier cascade
    out[7] = out[7] + 1
    local _, _, key = split_keyed_delivery(info)
    if revoke_from(keys, key, seq, 'expired', now, policy) then woke = true end
  end
end

while has_room() do
  local entries = redis.call('LPOP', ready_key, remaining)
  if not entries then break end
  serve(entries)
end

-- Stores the new leases and claims or, when nothing was leased, tells the caller in how many
-- microseconds the earliest lease, backoff or claim runs out (out[2]), so it knows when to look
-- again: at once when messages went to forward, since they may have taken the room of others.
if #claims > 0 then redis.call('ZADD', forwarding_key, unpack(claims)) end
if #leases > 0 then
  redis.call('ZADD', leased_key, unpack(leases))
else
  local next_due = #forwards > 0 and now or nil
  for _, waiting in ipairs({ leased_key, keys.delayed, forwarding_key }) do
    local earliest = redis.call('ZRANGE', waiting, 0, 0, 'WITHSCORES')
    if earliest[2] and (not next_due or tonumber(earliest[2]) < next_due) then next_due = tonumber(earliest[2]) end
  end
  if next_due then out[2] = next_due - now end
end
if #bodiless > 0 then mark_holds({ flags = KEYS[10], blocks = KEYS[11] }, bodiless, '0') end
if woke then redis.call('PUBLISH', ARGV[4], '1') end
out[4] = #forwards / 3
for _, value in ipairs(forwards) do out[#out + 1] = value end
-- Small leases come with their bodies (ARGV[9]), in the order of their entries: one HMGET per
-- run of them in one body block.
if #forwards == 0 and #leases > 0 and bytes <= tonumber(ARGV[9]) then
  local block_key, fields = nil, {}
  local function read_run()
    if not block_key then return end
    for _, body in ipairs(redis.call('HMGET', block_key, unpack(fields))) do out[#out + 1] = body end
  end
  for i = 2, #leases, 2 do
    local key, field = body_location(bodies_prefix, entry_seq(leases[i]))
    if key ~= block_key then
      read_run()
      block_key, fields = key, {}
    end
    fields[#fields + 1] = field
  end
  read_run()
  out[8] = #leases / 2
end
return out
