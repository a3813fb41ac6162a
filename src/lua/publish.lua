--[[
  publish: stores a batch of messages once and fans it out to every attached subscription.
  KEYS[1]    topic state (HASH: seq, attachVersion, deleted)
  KEYS[2]    message bodies (HASH seq -> body)
  KEYS[3]    body reference counts (HASH seq -> count, only while count > 1)
  KEYS[4..]  ready list of each attached subscription, in the order the caller read them
  ARGV[1]    time override in microseconds, or '' for Redis TIME
  ARGV[2]    attachVersion the caller read together with the attached set
  ARGV[3]    wake channel, published to when anyone is attached
  ARGV[4..]  packed message bodies (see src/broker/message-codec.ts)
  Returns    {1, firstSeq, publishTimeUs}   stored, seqs firstSeq .. firstSeq + n - 1
             {-1}                           the topic incarnation was deleted
             {-2}                           attachments changed: re-read them and retry
  Invariant: every subscription attached at publish time holds each new seq exactly once
             (in its ready list), and the body is kept while any of them holds it.
]]
local state_key, messages_key, refs_key = KEYS[1], KEYS[2], KEYS[3]
local now = now_us(ARGV[1])
local state = redis.call('HMGET', state_key, 'deleted', 'attachVersion')
if state[1] then return {-1} end
if (state[2] or '0') ~= ARGV[2] then return {-2} end

local count = #ARGV - 3
local last_seq = redis.call('HINCRBY', state_key, 'seq', count)
local first_seq = last_seq - count + 1
local subscriptions = #KEYS - 3
if subscriptions == 0 then return {1, first_seq, now} end

local publish_time = string.format('%016.0f', now)
local seqs, bodies = {}, {}
for i = 1, count do
  local seq = tostring(first_seq + i - 1)
  seqs[i] = seq
  bodies[2 * i - 1] = seq
  bodies[2 * i] = publish_time .. ARGV[3 + i]
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
for k = 4, #KEYS do
  redis.call('RPUSH', KEYS[k], unpack(seqs))
end
redis.call('PUBLISH', ARGV[3], '1')
return {1, first_seq, now}
