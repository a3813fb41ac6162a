--[[
  put-project-policy: writes one project's IAM policy into this region's control plane.
  KEYS[1]    project policies (HASH full project name -> JSON {name, version, bindings, etag})
  KEYS[2]    the count of control-plane puts of every kind (STRING, see control-plane.ts, sync)
  ARGV[1]    'cas' (setIamPolicy) or 'newer' (copy to other regions, sync)
  ARGV[2]    'cas': the state the caller read ('' = none); 'newer': ignored
  ARGV[3]    full project name (projects/<id>)
  ARGV[4]    the new state (JSON)
  ARGV[5]    its version
  Returns    {REPLY_OK, previous state} written; {REPLY_REFUSED, current state} refused (see
             may_put)
  Invariant: a region's copy only ever moves to a higher version. A policy is never deleted
             (one without bindings grants nothing). Every put that writes counts itself in KEYS[2].
]]
local policies_key, name, new_json = KEYS[1], ARGV[3], ARGV[4]
local current = redis.call('HGET', policies_key, name) or ''
if not may_put(ARGV[1], ARGV[2], new_json, tonumber(ARGV[5]), current) then return { REPLY_REFUSED, current } end
redis.call('HSET', policies_key, name, new_json)
redis.call('INCR', KEYS[2])
return { REPLY_OK, current }
