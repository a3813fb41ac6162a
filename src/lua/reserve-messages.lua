--[[
  reserve-messages: the first step of a publish whose request has no ordering key. Hands out the
  request's sequence numbers and its publish time, so that the broker can stamp the bodies and
  store them with a plain HSET in the MULTI/EXEC that runs publish.lua (see its header for why),
  and records the reservation, which that commit takes away.
  KEYS[1]    topic state (HASH: seq, attachVersion, deleted, reserved:<firstSeq>)
  ARGV[1]    time override in microseconds, or '' for Redis TIME
  ARGV[2]    number of messages in the request
  Returns    {1, firstSeq, publishTimeUs}   seqs firstSeq .. firstSeq + n - 1 belong to this request
             {-1}                           the topic incarnation was deleted
  Invariant: a seq is handed out once. A reservation whose commit never runs (the broker died in
             between) leaves a gap in the seqs and its reserved:<firstSeq> field, nothing else:
             message IDs increase, but need not be contiguous.
]]
local state_key = KEYS[1]
local now = now_us(ARGV[1])
if redis.call('HEXISTS', state_key, 'deleted') == 1 then return {-1} end
local count = tonumber(ARGV[2])
local first_seq = redis.call('HINCRBY', state_key, 'seq', count) - count + 1
redis.call('HSET', state_key, reservation_field(first_seq), count)
return {1, first_seq, now}
