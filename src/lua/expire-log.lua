--[[
  expire-log: releases the log's hold on the blocks it no longer needs to keep: those whose
  latest message is older than the topic's retention (the longest of its own and its retaining
  subscriptions'), or than RELEASE_GRACE_US once nothing retains. A body then goes as soon as no
  subscription holds it either. Called repeatedly while it answers that more are due.
  KEYS[1]    topic state (HASH retainUs, logBlock, ...)
  KEYS[2]    the retained log (ZSET block -> latest publish time in it, µs)
  KEYS[3]    prefix of the body block keys (see body_location in prelude.lua)
  KEYS[4]    body reference counts
  KEYS[5]    the log's earliest publish times (ZSET block -> µs)
  KEYS[6..]  the selections of the topic's attached subscriptions (their flags of a released
             block go with it)
  ARGV[1]    time override in microseconds, or ''
  ARGV[2]    the topic's messageRetentionDuration in µs, or '' when it has none (or is deleted):
             with none, and no retaining subscription, blocks go once RELEASE_GRACE_US old
  ARGV[3]    at most this many blocks are released in one call
  Returns    {REPLY_OK, released, more, retains, next}: how many blocks were released, 1 when
             more are due, 1 while the log holds blocks or the topic retains, and when a block
             may be due at the earliest at this retention (µs): its earliest latest publish
             time, or the earliest a later publish can stamp, plus the retention
  Invariant: the log's reference of each body is released exactly once: a block leaves the log
             as its bodies lose that reference, and a later publish never adds to it again
             (logBlock is cleared when it names the block).
]]
local state_key, log_key, bodies_prefix, refs_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = now_us(ARGV[1])
local batch = tonumber(ARGV[3])
local state = redis.call('HMGET', state_key, 'retainUs', 'logBlock')
local retention = math.max(tonumber(ARGV[2]) or 0, tonumber(state[1] or '0'))
-- Whoever began to retain just now may not have reached the caller's reading of the retention
-- yet (the caller reads it before the pass): what is younger than the shortest retention stays.
local RELEASE_GRACE_US = 600000000
local hold = math.max(retention, RELEASE_GRACE_US)
local due = redis.call('ZRANGEBYSCORE', log_key, '-inf', '(' .. string.format('%.0f', now - hold), 'LIMIT', 0, batch + 1)
local released = math.min(#due, batch)
for i = 1, released do
  local block = due[i]
  local fields = redis.call('HKEYS', bodies_prefix .. block)
  local seqs = {}
  for j, field in ipairs(fields) do seqs[j] = block .. field end
  if #seqs > 0 then release_bodies(bodies_prefix, refs_key, seqs) end
  redis.call('ZREM', log_key, block)
  redis.call('ZREM', KEYS[5], block)
  for k = 6, #KEYS do redis.call('HDEL', KEYS[k], block) end
  if state[2] == block then redis.call('HDEL', state_key, 'logBlock') end
end
local first = redis.call('ZRANGE', log_key, 0, 0, 'WITHSCORES')
local retains = (retention > 0 or #first > 0) and 1 or 0
local earliest = now - STAMP_MAX_BEHIND_US
if #first > 0 then earliest = math.min(earliest, tonumber(first[2])) end
return {REPLY_OK, released, #due > batch and 1 or 0, retains, string.format('%.0f', earliest + hold)}
