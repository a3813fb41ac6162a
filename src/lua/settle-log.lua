--[[
  settle-log: after the janitor's look at a topic incarnation's log (expire-log.lua), moves the
  incarnation's entry to when it is to look again, or removes it when nothing retains any more
  and the log is empty; unless the entry moved since the pass read it (a change of what retains
  the incarnation marked it: mark_log in prelude.lua), which the next pass looks at instead.
  KEYS[1]    when the janitor next looks at each incarnation's log (ZSET uid -> µs)
  KEYS[2]    what makes each incarnation retain (HASH `<uid>` -> how many live records do)
  ARGV[1]    the topic incarnation's uid
  ARGV[2]    the entry's time as the pass read it (µs)
  ARGV[3]    when to look again (µs): expire-log's next
  ARGV[4]    '1' when expire-log found the log holding blocks or the topic retaining
  Returns    REPLY_OK settled; REPLY_REFUSED the entry moved meanwhile (kept as it is)
  Invariant: an incarnation that a live record makes retain, or whose log holds blocks, keeps an
             entry no later than its log's earliest due block at the retention last judged; a
             change of that retention marks it anew.
]]
local expiries_key, retention_key, topic_uid = KEYS[1], KEYS[2], ARGV[1]
if tonumber(redis.call('ZSCORE', expiries_key, topic_uid)) ~= tonumber(ARGV[2]) then return REPLY_REFUSED end
if ARGV[4] == '1' or redis.call('HEXISTS', retention_key, topic_uid) == 1 then
  redis.call('ZADD', expiries_key, ARGV[3], topic_uid)
else
  redis.call('ZREM', expiries_key, topic_uid)
end
return REPLY_OK
