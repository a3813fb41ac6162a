--[[
  replace-record: compare-and-set of one control-plane record (topic or subscription update).
  KEYS[1]    record hash (topics or subscriptions)
  ARGV[1]    full resource name
  ARGV[2]    the record the caller read (JSON)
  ARGV[3]    the new record (JSON)
  Returns    1 replaced; 0 the record changed or vanished meanwhile (re-read and retry)
  Invariant: concurrent updates never overwrite each other's fields.
]]
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
