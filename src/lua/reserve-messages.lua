--[[
  reserve-messages: the first step of a publish whose request has no ordering key. Hands out the
  request's sequence numbers and its publish time, so that the broker can stamp the bodies and
  store them with a plain HSET in the MULTI/EXEC that runs publish.lua (see its header for why).
  KEYS[1]    topic state (HASH: seq, attachVersion, deleted)
  ARGV[1]    time override in microseconds, or '' for Redis TIME
  ARGV[2]    number of messages in the request
  Returns    {1, firstSeq, publishTimeUs}   seqs firstSeq .. firstSeq + n - 1 belong to this request
             {-1}                           the topic incarnation was deleted
  Invariant: a seq is handed out once. A reservation whose MULTI/EXEC never commits (the broker
             died in between) leaves a gap: message IDs increase, but need not be contiguous.
]]
local state_key = KEYS[1]
local now = now_us(ARGV[1])
if redis.call('HEXISTS', state_key, 'deleted') == 1 then return {-1} end
local count = tonumber(ARGV[2])
local last_seq = redis.call('HINCRBY', state_key, 'seq', count)
return {1, last_seq - count + 1, now}
