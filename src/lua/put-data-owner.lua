--[[
  put-data-owner: writes the state (record or tombstone) of a subscription or a snapshot into
  this region's control plane: both belong to a topic incarnation and own data in it. A record
  is put after its data is made (attached, or captured); a tombstone marks the data of the
  record it ends for clean-up (the caller then drops it). A detached subscription record
  (`detached` in its JSON) is kept and listed, but not under its topic, and marks its own data
  for clean-up as a tombstone would.
  KEYS[1]    records of the kind (HASH full name -> JSON)
  KEYS[2]    their name index (ZSET)
  KEYS[3]    their tombstones (HASH full name -> JSON {name, version, deleted, uid, topicUid})
  KEYS[4]    the names of the kind under the state's topic incarnation (ZSET)
  KEYS[5]    pending data clean-ups (ZSET "topicUid/uid/name" -> since, microseconds)
  KEYS[6]    the count of puts of either kind (STRING): a broker's copy of the subscription
             records is current while it has not moved (src/broker/subscription-records.ts)
  KEYS[7]    the kind's expiry index (ZSET full name -> the earliest time it may expire, µs):
             the expiration pass looks only at the entries that are due (reschedule-expiry.lua)
  KEYS[8]    what makes each topic incarnation retain (HASH `<uid>` -> how many live records do)
  KEYS[9]    when the janitor next looks at each incarnation's log (ZSET uid -> µs)
  KEYS[10]   the count of control-plane puts of every kind (STRING, see control-plane.ts, sync)
  ARGV[1]    'cas' (create, update, detach, delete) or 'newer' (copy to other regions, sync)
  ARGV[2]    'cas': the state the caller read ('' = none); 'newer': ignored
  ARGV[3]    full name
  ARGV[4]    the new state (JSON)
  ARGV[5]    its version
  ARGV[6]    '1' if the new state is a tombstone
  ARGV[7]    time override in microseconds, or ''
  ARGV[8]    a create's limits: the prefix of its project's names of the kind
  ARGV[9]    how many of the kind the project may hold ('' = no limit)
  ARGV[10]   how many of the kind its topic may have ('' = no limit)
  ARGV[11]   how long after now the new state may expire at the earliest (µs), or '' for never
             (a tombstone, a detached subscription, no expiration policy)
  ARGV[12]   the kind: 'subscription' or 'snapshot'
  Returns    {REPLY_OK, previous state} written; {REPLY_REFUSED, current state} refused (see
             may_put); a create refused for a limit: {REPLY_PROJECT_FULL, ''} the project holds
             its limit, {REPLY_TOPIC_FULL, ''} the topic has its limit
  Invariant: a recorded subscription is attached in this region unless it is detached; the
             data of a record that a put ends (deleted, detached, or replaced by another
             incarnation) is marked for clean-up. A record that may expire is in the expiry index,
             due no later than it may expire: every put counts as a use from its time on. A
             snapshot, and a subscription that retains acked messages (not detached), counts once
             in KEYS[8] under its topic incarnation; a put that starts, changes or ends one marks
             that incarnation's log for the janitor's next pass (mark_log). Every put that writes
             counts itself in KEYS[6] and KEYS[10].
]]
local records_key, index_key, tombstones_key, topic_members_key, cleanups_key, changes_key, expiries_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local name, new_json = ARGV[3], ARGV[4]
local current = record_state(records_key, tombstones_key, name)
if not may_put(ARGV[1], ARGV[2], new_json, tonumber(ARGV[5]), current) then return { REPLY_REFUSED, current } end
if creates_name(ARGV[1], ARGV[6], current) then
  if prefix_full(index_key, ARGV[8], ARGV[9]) then return { REPLY_PROJECT_FULL, '' } end
  if ARGV[10] ~= '' and redis.call('ZCARD', topic_members_key) >= tonumber(ARGV[10]) then
    return { REPLY_TOPIC_FULL, '' }
  end
end
local new = cjson.decode(new_json)
local function data_ref(state) return state.topicUid .. '/' .. state.uid .. '/' .. state.name end
local previous = current ~= '' and cjson.decode(current) or nil
if previous and not previous.deleted and (ARGV[6] == '1' or previous.uid ~= new.uid) then
  redis.call('ZADD', cleanups_key, now_us(ARGV[7]), data_ref(previous))
end
if ARGV[6] == '1' then
  redis.call('HDEL', records_key, name)
  redis.call('ZREM', index_key, name)
  redis.call('ZREM', topic_members_key, name)
  redis.call('HSET', tombstones_key, name, new_json)
else
  redis.call('HSET', records_key, name, new_json)
  redis.call('ZADD', index_key, 0, name)
  redis.call('HDEL', tombstones_key, name)
  if new.detached then
    redis.call('ZREM', topic_members_key, name)
    redis.call('ZADD', cleanups_key, now_us(ARGV[7]), data_ref(new))
  else
    redis.call('ZADD', topic_members_key, 0, name)
    redis.call('ZREM', cleanups_key, data_ref(new))
  end
end
if ARGV[11] == '' then
  redis.call('ZREM', expiries_key, name)
else
  redis.call('ZADD', expiries_key, string.format('%.0f', now_us(ARGV[7]) + tonumber(ARGV[11])), name)
end
-- The topic incarnation a state makes retain, if it does.
local function retaining_uid(state)
  if not state or state.deleted then return nil end
  if ARGV[12] == 'snapshot' or (state.retainAckedMessages == true and not state.detached) then return state.topicUid end
  return nil
end
local before, after = retaining_uid(previous), retaining_uid(new)
if before then count_log_retainer(KEYS[8], before, -1) end
if after then count_log_retainer(KEYS[8], after, 1) end
if before then mark_log(KEYS[9], before, now_us(ARGV[7])) end
if after and after ~= before then mark_log(KEYS[9], after, now_us(ARGV[7])) end
redis.call('INCR', changes_key)
redis.call('INCR', KEYS[10])
return { REPLY_OK, current }
