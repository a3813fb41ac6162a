--[[
  read-backlog: reads one page of a subscription's unacknowledged messages by state, without
  changing anything (no lease, no activeAt). The messages are read in streams, each in an order
  that a message keeps while it stays where it is, so that a page's end is a position to go on
  from: r the ready list, from its back (the last to be delivered) to its front; l the leases,
  d the delayed set and f the forwarding set, each by score then member; k the keyed set, by key
  then seq. Unkeyed messages are in r, l, d and f; every keyed message is in k (only there: l and
  f skip the keyed ones), and a keyed message's state is its keyed delivery.
  KEYS[1]    subscription config (HASH ordered "1"|"0"; only its existence and ordered are read)
  KEYS[2]    ready list (LIST of "seq" | "seq:gen" | "k:<key>")
  KEYS[3]    leases (ZSET "seq:gen" -> deadline, µs)
  KEYS[4]    delayed (ZSET "seq" or a run "<first>-<last>" scheduled | "seq:gen" in backoff |
             "k:<key>" -> when due, µs)
  KEYS[5]    forwarding (ZSET "seq:gen" -> until when its forwarder's claim holds, µs)
  KEYS[6]    keyed ZSET (un-acked keyed messages, by key then seq)
  KEYS[7]    keyed deliveries (HASH seq -> "<gen>|<o|s|w|f>|<key>", gen maybe with /uncounted/due)
  ARGV[1]    the streams to read, in this order, as letters (e.g. "rldfk")
  ARGV[2]    the stream to start in (one of ARGV[1]; '' for the first)
  ARGV[3]    the position in it to go on after: '' for its start; r: the entry last read; l,
             d, f: the score last read; k: the member last read
  ARGV[4]    r: how far from the back the entry last read was at least (its index from the
             back only grows while it stays: entries leave the front only); l, d, f: the
             member last read (d, in a run: "<run>@<seq last read>"); else ''
  ARGV[5]    budget: how many entries at most to examine
  ARGV[6]    an ordering key: k reads only that key's messages; '' for all
  Returns    {REPLY_OK, examined, nextStream, nextA, nextB, (stream, a, b, seq, state,
             attempts, timeUs) ...}: the messages examined, each with its position (stream, a,
             b: what ARGV[2..4] take to go on after it), seq, state (a available, l leased,
             s scheduled, b in backoff, f being forwarded), delivery attempts so far, and the
             time that fits its state ('' for none); nextStream '' when every stream is read,
             else where to go on (nextA, nextB as ARGV[3], ARGV[4]). examined counts the
             entries Redis handed the script (what bounds the page's cost).
             A state is where the message is stored: one whose delivery time or backoff end
             has passed stays scheduled or in backoff (with that time) until a pull takes it,
             and a lease past its deadline stays leased until a pull ends it; so a message
             changes stream only when its state changes.
             {REPLY_NO_SUBSCRIPTION}  the subscription is not attached here
  Invariant: writes nothing. A message that stays in its stream and keeps its place (a lease its
             deadline, a delayed entry its time) is returned once over the pages from the start
             to the end, never skipped; one call reads at most the budget's entries after the
             position, plus what finding the position takes: a window of at most the budget of
             the ready list, or a binary search of O(log n) entries of a sorted set.
]]
local config_key, ready_key, leased_key, delayed_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local forwarding_key, keyed_key, deliveries_key = KEYS[5], KEYS[6], KEYS[7]
local ordered = redis.call('HGET', config_key, 'ordered')
if not ordered then return {REPLY_NO_SUBSCRIPTION} end
ordered = ordered == '1'
local streams, stream, after_a, after_b = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local budget, only_key = tonumber(ARGV[5]), ARGV[6]
local examined = 0
local out = {REPLY_OK, 0, '', '', ''}

local function item(a, b, seq, state, attempts, time)
  local n = #out
  out[n + 1], out[n + 2], out[n + 3], out[n + 4] = stream, a, b, seq
  out[n + 5], out[n + 6], out[n + 7] = state, attempts, time and string.format('%.0f', time) or ''
end

-- Byte order, as Redis sorts the members of equal scores (Lua's < follows the locale).
local function bytes_before(x, y)
  local n = math.min(#x, #y)
  for i = 1, n do
    local bx, by = string.byte(x, i), string.byte(y, i)
    if bx ~= by then return bx < by end
  end
  return #x < #y
end

-- r: walks from the back of the list to its front. Returns where to go on, or nil at the front.
local function read_ready()
  -- What finding the entry last read costs does not count against the entries read after it.
  local room = budget - examined
  local len = redis.call('LLEN', ready_key)
  local from = len - 1 -- the index of the next entry to examine
  if after_a ~= '' then
    -- The entry last read is at least after_b from the back (only pushes to the back move it away
    -- from there), or it left the list by the front, and every entry in front of it with it.
    local back = tonumber(after_b)
    local at = len - 1 - back
    if at < 0 then return nil end
    examined = examined + 1
    if redis.call('LINDEX', ready_key, at) == after_a then
      from = at - 1
    else
      -- Appends moved it further from the back: look for it in the window behind.
      local low = math.max(0, at - budget)
      local window = redis.call('LRANGE', ready_key, low, at - 1)
      examined = examined + #window
      from = nil
      for i = #window, 1, -1 do
        if window[i] == after_a then
          from = low + i - 2
          break
        end
      end
      if not from then
        if low == 0 then return nil end
        return {after_a, string.format('%d', back + (at - low) + 1)}
      end
    end
  end
  if from < 0 then return nil end
  local low = math.max(0, from - room + 1)
  local entries = redis.call('LRANGE', ready_key, low, from)
  examined = examined + #entries
  local last
  for i = #entries, 1, -1 do
    local entry = entries[i]
    local back = string.format('%d', len - 1 - (low + i - 1))
    if not is_key_marker(entry) then
      local seq, gen = split_entry(entry)
      item(entry, back, seq, 'a', attempts_of(gen), nil)
    end
    last = {entry, back}
  end
  if low == 0 then return nil end
  return last
end

-- The index of the first member after (score, member) in a sorted set: members of equal scores
-- are in byte order, so a binary search among them finds it.
local function zset_index_after(key, score, member)
  local low, high = 0, 0
  if score ~= '' then
    low = redis.call('ZCOUNT', key, '-inf', '(' .. score)
    high = redis.call('ZCOUNT', key, '-inf', score)
  end
  while low < high do
    local middle = math.floor((low + high) / 2)
    local probe = redis.call('ZRANGE', key, middle, middle)[1]
    examined = examined + 1
    if bytes_before(member, probe) then high = middle else low = middle + 1 end
  end
  return low
end

-- l, f: by score, then member.
local function read_zset(key)
  -- What finding the member last read costs does not count against the members read after it.
  local room = budget - examined
  local first = zset_index_after(key, after_a, after_b)
  local entries = redis.call('ZRANGE', key, first, first + room - 1, 'WITHSCORES')
  local count = #entries / 2
  examined = examined + count
  if count == 0 then return nil end
  local seqs, gens = {}, {}
  for j = 1, count do seqs[j], gens[j] = split_entry(entries[2 * j - 1]) end
  -- On ordered subscriptions a lease or a forward may be a keyed message's: k reads those.
  local keyed = {}
  if ordered then keyed = redis.call('HMGET', deliveries_key, unpack(seqs)) end
  for j = 1, count do
    if not keyed[j] then
      local entry, score, attempts = entries[2 * j - 1], entries[2 * j], attempts_of(gens[j])
      if key == leased_key then
        item(score, entry, seqs[j], 'l', attempts, tonumber(score))
      else
        item(score, entry, seqs[j], 'f', attempts, nil)
      end
    end
  end
  if count < room then return nil end
  return {entries[2 * count], entries[2 * count - 1]}
end

-- d: by score, then member; a run "<first>-<last>" (scheduled messages published together) by
-- seq within it, its position "<first>-<last>@<seq>". Key markers are skipped.
local function read_delayed()
  local room = budget - examined
  local member, inside = after_b, nil
  local at = not is_key_marker(after_b) and string.find(after_b, '@', 1, true)
  if at then member, inside = string.sub(after_b, 1, at - 1), tonumber(string.sub(after_b, at + 1)) end
  local first = zset_index_after(delayed_key, after_a, member)
  local entries = redis.call('ZRANGE', delayed_key, first, first + room - 1, 'WITHSCORES')
  -- The rest of the run the last page stopped in, while it waits (a pull moves a run whole).
  if inside and redis.call('ZSCORE', delayed_key, member) then
    table.insert(entries, 1, after_a)
    table.insert(entries, 1, member)
  else
    inside = nil
  end
  local read = 0
  for j = 1, #entries / 2 do
    local entry, score = entries[2 * j - 1], entries[2 * j]
    local low, high = string.match(entry, '^(%d+)-(%d+)$')
    if low then
      low = (j == 1 and inside or tonumber(low) - 1) + 1
      for seq = low, tonumber(high) do
        if read >= room then return {score, entry .. '@' .. string.format('%d', seq - 1)} end
        read, examined = read + 1, examined + 1
        item(score, entry .. '@' .. string.format('%d', seq), string.format('%d', seq), 's', 0, tonumber(score))
      end
    else
      if read >= room then return {entries[2 * j - 2], entries[2 * j - 3]} end
      read, examined = read + 1, examined + 1
      if not is_key_marker(entry) then
        local seq, gen = split_entry(entry)
        local attempts = attempts_of(gen)
        item(score, entry, seq, attempts == 0 and 's' or 'b', attempts, tonumber(score))
      end
    end
  end
  if #entries / 2 - (inside and 1 or 0) < room then return nil end
  return {entries[#entries], entries[#entries - 1]}
end

-- k: by key, then seq.
local function read_keyed()
  local room = budget - examined
  local min, max = '-', '+'
  if only_key ~= '' then min, max = key_range(only_key) end
  if after_a ~= '' then min = '(' .. after_a end
  local members = redis.call('ZRANGEBYLEX', keyed_key, min, max, 'LIMIT', 0, room)
  examined = examined + #members
  if #members == 0 then return nil end
  local seqs = {}
  for i, member in ipairs(members) do seqs[i] = keyed_member_seq(member) end
  local infos = redis.call('HMGET', deliveries_key, unpack(seqs))
  for i, member in ipairs(members) do
    local seq, info = seqs[i], infos[i]
    if not info then
      item(member, '', seq, 'a', 0, nil)
    else
      local gen, state, _, uncounted, due = split_keyed_delivery(info)
      local attempts = attempts_of(gen) - uncounted
      if is_outstanding(state) then
        item(member, '', seq, 'l', attempts, tonumber(redis.call('ZSCORE', leased_key, seq .. ':' .. gen)))
      elseif state == 'f' then
        item(member, '', seq, 'f', attempts, nil)
      elseif due then
        item(member, '', seq, attempts == 0 and 's' or 'b', attempts, due)
      else
        item(member, '', seq, 'a', attempts, nil)
      end
    end
  end
  if #members < room then return nil end
  return {members[#members], ''}
end

local readers = {
  r = read_ready,
  l = function() return read_zset(leased_key) end,
  d = read_delayed,
  f = function() return read_zset(forwarding_key) end,
  k = read_keyed,
}

local at = string.find(streams, stream, 1, true)
while at and at <= #streams do
  stream = string.sub(streams, at, at)
  local next_position = readers[stream]()
  if next_position then
    out[3], out[4], out[5] = stream, next_position[1], next_position[2]
    break
  end
  at = at + 1
  after_a, after_b = '', ''
  if examined >= budget and at <= #streams then
    out[3] = string.sub(streams, at, at)
    break
  end
end
out[2] = examined
return out
