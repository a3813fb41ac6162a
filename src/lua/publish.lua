--[[
  publish: stores a batch of messages once and fans it out to every attached subscription.
  Bodies arrive in one of two ways:
    - In ARGV (requests with an ordering key): this script allocates the seqs and prepends the
      publish time. Allocating at commit keeps one key's seqs in the order its publishes commit.
    - Already stored (requests without one): the broker ran reserve-messages, stamped the bodies
      itself, and queued `HSET messages seq body ...` right before this script in one MULTI/EXEC.
      Passing 100 KB of bodies through Lua costs Redis a copy and a hash pass per body, plus the
      concatenation; a plain HSET skips all three (measured: 588 -> ~200 us per 100 x 1 KB). On
      a refusal this script deletes those bodies again, so the transaction stores nothing. The
      commit takes away the reservation's state field; a commit that finds it gone was run
      before (ioredis resends a transaction whose reply a dropped connection lost) and changes
      nothing, since fanning out twice would give each subscription the seqs twice and reset
      their reference counts: the first acks would then delete a body others still hold. (Its
      HSET did run again: if every subscription had acked those messages meanwhile, their
      bodies are stored again with no holder. A leak, in that double fault only.)
  KEYS[1]    topic state (HASH: seq, attachVersion, deleted, reserved:<firstSeq>)
  KEYS[2]    message bodies (HASH seq -> body)
  KEYS[3]    body reference counts (HASH seq -> count, only while count > 1)
  KEYS[4..]  three keys per attached subscription, in the order the caller read them:
             its ready list, its keyed ZSET and its key states (the last two used when ordered)
  ARGV[1]    time override in microseconds, or '' for Redis TIME
  ARGV[2]    attachVersion the caller read together with the attached subscriptions
  ARGV[3]    wake channel, published to when anyone is attached
  ARGV[4]    the request's ordering key ('' for none; one key per request)
  ARGV[5]    one character per attached subscription: '1' ordered, '0' not
  ARGV[6]    '' when the bodies come in ARGV[7..]; else the first reserved seq of bodies already stored
  ARGV[7..]  the packed bodies without their time (see src/broker/message-codec.ts); or, with
             ARGV[6] set, one value: how many bodies are already stored
  Returns    {1, firstSeq}   stored (or stored before), seqs firstSeq .. firstSeq + n - 1
             {-1}            the topic incarnation was deleted
             {-2}            attachments changed: re-read them and retry (with the same reservation)
  Invariant: every subscription attached at publish time holds each new seq exactly once (in its
             ready list, or for an ordered one with a key, in its keyed ZSET with the key queued
             or busy), and the body is kept while any of them holds it; a refused publish leaves
             no body behind.
]]
local state_key, messages_key, refs_key = KEYS[1], KEYS[2], KEYS[3]
local ordering_key, ordered_flags = ARGV[4], ARGV[5]
local prestored = ARGV[6] ~= ''
local first_body = 7
local subscriptions = (#KEYS - 3) / 3

local function seq_range(first, count)
  local seqs = {}
  for i = 1, count do seqs[i] = tostring(first + i - 1) end
  return seqs
end

local first_seq, count, seqs
if prestored then
  first_seq, count = tonumber(ARGV[6]), tonumber(ARGV[7])
  seqs = seq_range(first_seq, count)
  if redis.call('HEXISTS', state_key, reservation_field(first_seq)) == 0 then return {1, first_seq} end
else
  count = #ARGV - first_body + 1
end

local state = redis.call('HMGET', state_key, 'deleted', 'attachVersion')
local refusal = (state[1] and -1) or ((state[2] or '0') ~= ARGV[2] and -2) or nil
if refusal then
  if prestored then redis.call('HDEL', messages_key, unpack(seqs)) end
  return {refusal}
end

if prestored then
  redis.call('HDEL', state_key, reservation_field(first_seq))
else
  first_seq = redis.call('HINCRBY', state_key, 'seq', count) - count + 1
  seqs = seq_range(first_seq, count)
end
if subscriptions == 0 then return {1, first_seq} end

if not prestored then
  local publish_time = string.format('%016.0f', now_us(ARGV[1]))
  local bodies = {}
  for i = 1, count do
    bodies[2 * i - 1] = seqs[i]
    bodies[2 * i] = publish_time .. ARGV[first_body + i - 1]
  end
  redis.call('HSET', messages_key, unpack(bodies))
end
if subscriptions > 1 then
  local refs = {}
  for i = 1, count do
    refs[2 * i - 1] = seqs[i]
    refs[2 * i] = subscriptions
  end
  redis.call('HSET', refs_key, unpack(refs))
end

local keyed_members
for s = 1, subscriptions do
  local ready_key, keyed_key, key_states_key = KEYS[3 * s + 1], KEYS[3 * s + 2], KEYS[3 * s + 3]
  if ordering_key ~= '' and string.sub(ordered_flags, s, s) == '1' then
    if not keyed_members then
      keyed_members = {}
      for i = 1, count do
        keyed_members[2 * i - 1] = 0
        keyed_members[2 * i] = keyed_member(ordering_key, seqs[i])
      end
    end
    redis.call('ZADD', keyed_key, unpack(keyed_members))
    if redis.call('HSETNX', key_states_key, ordering_key, 'q') == 1 then
      redis.call('RPUSH', ready_key, 'k:' .. ordering_key)
    end
  else
    redis.call('RPUSH', ready_key, unpack(seqs))
  end
end
redis.call('PUBLISH', ARGV[3], '1')
return {1, first_seq}
