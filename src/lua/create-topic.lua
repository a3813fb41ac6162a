--[[
  create-topic: records a new topic in the control plane.
  KEYS[1]    topic records (HASH full name -> JSON)
  KEYS[2]    topic name index (ZSET, score 0, for listing in name order)
  ARGV[1]    full topic name
  ARGV[2]    topic record (JSON, carries the incarnation uid)
  Returns    1 created; 0 a topic with that name exists
  Invariant: one record per name; the index holds exactly the recorded names.
]]
local topics_key, index_key = KEYS[1], KEYS[2]
if redis.call('HSETNX', topics_key, ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('ZADD', index_key, 0, ARGV[1])
return 1
