--[[
  put-topic: writes one topic's state (record or tombstone) into this region's control plane.
  KEYS[1]    topic records (HASH full name -> JSON)
  KEYS[2]    topic name index (ZSET, score 0, for listing in name order)
  KEYS[3]    topic tombstones (HASH full name -> JSON {name, version, deleted, uid})
  KEYS[4]    the subscription names of the state's incarnation (ZSET; dropped with a tombstone)
  KEYS[5]    the snapshot names of the state's incarnation (ZSET; dropped with a tombstone)
  KEYS[6]    what makes each incarnation retain (HASH, see count_log_retainer in prelude.lua):
             `<uid>` -> how many live records do, `<uid>:topic` -> its topic's retention (µs)
  KEYS[7]    when the janitor next looks at each incarnation's log (ZSET uid -> µs)
  KEYS[8]    the count of control-plane puts of every kind (STRING, see control-plane.ts, sync)
  ARGV[1]    'cas' (create, update, delete) or 'newer' (copy to other regions, sync)
  ARGV[2]    'cas': the state the caller read ('' = none); 'newer': ignored
  ARGV[3]    full topic name
  ARGV[4]    the new state (JSON)
  ARGV[5]    its version
  ARGV[6]    '1' if the new state is a tombstone
  ARGV[7]    a create's limit: the prefix of its project's topic names
  ARGV[8]    and how many topics the project may hold ('' = no limit)
  ARGV[9]    the new state's messageRetentionDuration in µs, or '' (none, or a tombstone)
  ARGV[10]   time override in microseconds, or ''
  Returns    {REPLY_OK, previous state} written; {REPLY_REFUSED, current state} refused (see
             may_put); {REPLY_PROJECT_FULL, ''} a create refused: the project holds its limit
  Invariant: one state per name (record xor tombstone); the index holds exactly the recorded
             names; a region's copy only ever moves to a higher version. A recorded topic with a
             retention counts once in KEYS[6] with its retention; a put that starts, changes or
             ends one marks the incarnation's log for the janitor's next pass (mark_log). Every
             put that writes counts itself in KEYS[8].
]]
local topics_key, index_key, tombstones_key = KEYS[1], KEYS[2], KEYS[3]
local name, new_json = ARGV[3], ARGV[4]
local current = record_state(topics_key, tombstones_key, name)
if not may_put(ARGV[1], ARGV[2], new_json, tonumber(ARGV[5]), current) then return { REPLY_REFUSED, current } end
if creates_name(ARGV[1], ARGV[6], current) and prefix_full(index_key, ARGV[7], ARGV[8]) then
  return { REPLY_PROJECT_FULL, '' }
end
if ARGV[6] == '1' then
  redis.call('HDEL', topics_key, name)
  redis.call('ZREM', index_key, name)
  redis.call('HSET', tombstones_key, name, new_json)
  redis.call('DEL', KEYS[4], KEYS[5])
else
  redis.call('HSET', topics_key, name, new_json)
  redis.call('ZADD', index_key, 0, name)
  redis.call('HDEL', tombstones_key, name)
end
local function retaining_uid(state)
  if state.deleted or type(state.messageRetentionDuration) ~= 'string' then return nil end
  return state.uid
end
local before = current ~= '' and retaining_uid(cjson.decode(current)) or nil
local after = ARGV[9] ~= '' and cjson.decode(new_json).uid or nil
if before then
  count_log_retainer(KEYS[6], before, -1)
  redis.call('HDEL', KEYS[6], before .. ':topic')
end
if after then
  count_log_retainer(KEYS[6], after, 1)
  redis.call('HSET', KEYS[6], after .. ':topic', ARGV[9])
end
local now = (before or after) and now_us(ARGV[10])
if before then mark_log(KEYS[7], before, now) end
if after and after ~= before then mark_log(KEYS[7], after, now) end
redis.call('INCR', KEYS[8])
return { REPLY_OK, current }
