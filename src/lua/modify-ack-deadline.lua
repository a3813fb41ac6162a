--[[
  modify-ack-deadline: sets new deadlines for deliveries of one subscription; 0 seconds is a nack.
  KEYS[1]    subscription config (HASH: exactlyOnce "1"|"0")
  KEYS[2]    leases (ZSET "seq:gen" -> deadline in microseconds)
  KEYS[3]    ready list (a nacked delivery goes back to its front)
  ARGV[1]    time override in microseconds, or ''
  ARGV[2]    new deadline in seconds from now (0..600)
  ARGV[3]    wake channel, published to when something was nacked
  ARGV[4..]  deliveries as "seq:gen"
  Returns    {-1} when the subscription does not exist, else one code per delivery:
             1  deadline changed (or nacked)
             0  no such lease: acknowledged, superseded, nacked before, or unknown
             2  the lease expired; on exactly-once subscriptions nothing changed, on others the
                deadline was changed anyway (the message had not been delivered again yet)
  Invariant: only the named generation's lease changes; a nack ends that lease, so its ack ID
             stops working, and makes the message available at once.
]]
local config_key, leased_key, ready_key = KEYS[1], KEYS[2], KEYS[3]
local now = now_us(ARGV[1])
local seconds = tonumber(ARGV[2])
local exactly_once = exactly_once_mode(config_key)
if exactly_once == nil then return {-1} end
mark_active(config_key, now)

local results = {}
local nacked = false
for i = 4, #ARGV do
  local member = ARGV[i]
  local status = lease_status(redis.call('ZSCORE', leased_key, member), now, exactly_once)
  if status == 'valid' or status == 'expired' then
    if seconds == 0 then
      redis.call('ZREM', leased_key, member)
      redis.call('LPUSH', ready_key, member)
      nacked = true
    else
      redis.call('ZADD', leased_key, 'XX', now + seconds * 1000000, member)
    end
  end
  results[#results + 1] = RESULT[status]
end
if nacked then redis.call('PUBLISH', ARGV[3], '1') end
return results
