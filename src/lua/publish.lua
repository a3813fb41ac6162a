--[[
  publish: stores a batch of messages once and fans it out to every attached subscription.
  KEYS[1]    topic state (HASH: seq, attachVersion, deleted)
  KEYS[2]    message bodies (HASH seq -> body)
  KEYS[3]    body reference counts (HASH seq -> count, only while count > 1)
  KEYS[4..]  three keys per attached subscription, in the order the caller read them:
             its ready list, its keyed ZSET and its key states (the last two used when ordered)
  ARGV[1]    time override in microseconds, or '' for Redis TIME
  ARGV[2]    the publish time (µs) the broker stamped into every body, from its reading of the
             one clock (PublishClock in src/broker/clock.ts); accepted from 10 s behind now to
             1 s ahead of it (a stamp trails by the time the call waited on its way here)
  ARGV[3]    attachVersion the caller read together with the attached subscriptions
  ARGV[4]    wake channel, published to when anyone is attached
  ARGV[5]    the request's ordering key ('' for none; one key per request)
  ARGV[6]    one character per attached subscription: '1' ordered, '0' not
  ARGV[7..]  message bodies as stored: the stamp's 16 digits, then what the broker packs (see
             src/broker/message-codec.ts). Stored as they come: Lua builds no string per body.
  Returns    {1, firstSeq, nowUs}   stored, seqs firstSeq .. firstSeq + n - 1
             {-1}                   the topic incarnation was deleted
             {-2}                   attachments changed: re-read them and retry
             {-3, nowUs}            the stamp is too far from now: stamp again from nowUs and retry
  Invariant: every subscription attached at publish time holds each new seq exactly once (in its
             ready list, or for an ordered one with a key, in its keyed ZSET with the key queued
             or busy), and the body is kept while any of them holds it. Every stored publish
             time is within [now - 10 s, now + 1 s] of the one clock when it was stored.
]]
local state_key, messages_key, refs_key = KEYS[1], KEYS[2], KEYS[3]
local STAMP_MAX_BEHIND_US, STAMP_MAX_AHEAD_US = 10000000, 1000000
local now = now_us(ARGV[1])
local state = redis.call('HMGET', state_key, 'deleted', 'attachVersion')
if state[1] then return {-1} end
if (state[2] or '0') ~= ARGV[3] then return {-2} end
local stamp = tonumber(ARGV[2])
if not stamp or stamp < now - STAMP_MAX_BEHIND_US or stamp > now + STAMP_MAX_AHEAD_US then return {-3, now} end

local ordering_key, ordered_flags = ARGV[5], ARGV[6]
local first_body = 7
local count = #ARGV - first_body + 1
local last_seq = redis.call('HINCRBY', state_key, 'seq', count)
local first_seq = last_seq - count + 1
local subscriptions = (#KEYS - 3) / 3
if subscriptions == 0 then return {1, first_seq, now} end

local seqs, bodies = {}, {}
for i = 1, count do
  local seq = tostring(first_seq + i - 1)
  seqs[i] = seq
  bodies[2 * i - 1] = seq
  bodies[2 * i] = ARGV[first_body + i - 1]
end
redis.call('HSET', messages_key, unpack(bodies))
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
redis.call('PUBLISH', ARGV[4], '1')
return {1, first_seq, now}
