--[[
  pull: leases up to N available messages of one subscription to the caller.
  KEYS[1]    subscription config (HASH ackDeadlineUs, retentionUs, ...)
  KEYS[2]    ready list (LIST of "seq" | "seq:gen", oldest first)
  KEYS[3]    leases (ZSET "seq:gen" -> deadline in microseconds)
  KEYS[4]    message bodies (HASH seq -> body)
  KEYS[5]    body reference counts
  ARGV[1]    time override in microseconds, or ''
  ARGV[2]    maximum number of messages
  ARGV[3]    lease length in microseconds, or '' for the subscription's ack deadline
  ARGV[4]    byte budget: no further message once the bodies returned reach it (at least one goes)
  Returns    {1, nextDueUs, seq1, gen1, body1, seq2, gen2, body2, ...}
             nextDueUs: when nothing was leased, microseconds until the earliest lease
             deadline ('' if there is no lease), so the caller knows when to look again
             {-1}   the subscription does not exist (deleted, or never attached)
  Invariant: a message is leased to at most one delivery (generation) at a time; a lease
             whose deadline has passed is re-leased with the next generation; messages older
             than the retention are dropped, never delivered.
]]
local config_key, ready_key, leased_key, messages_key, refs_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now = now_us(ARGV[1])
local max = tonumber(ARGV[2])
local config = redis.call('HMGET', config_key, 'ackDeadlineUs', 'retentionUs')
if not config[1] then return {-1} end
mark_active(config_key, now)
local deadline = now + tonumber(ARGV[3] ~= '' and ARGV[3] or config[1])
local oldest_kept = now - tonumber(config[2])

-- Expired leases first: they are the oldest outstanding work.
local candidates = redis.call('ZRANGEBYSCORE', leased_key, '-inf', now, 'LIMIT', 0, max)
if #candidates > 0 then redis.call('ZREM', leased_key, unpack(candidates)) end
if #candidates < max then
  local fresh = redis.call('LPOP', ready_key, max - #candidates)
  if fresh then
    for _, entry in ipairs(fresh) do candidates[#candidates + 1] = entry end
  end
end

local out = {1, ''}
local leases = {}
local bytes, max_bytes = 0, tonumber(ARGV[4])
for i, entry in ipairs(candidates) do
  if bytes >= max_bytes then
    -- Over the byte budget: the rest goes back to the front of the ready list, in order.
    for j = #candidates, i, -1 do redis.call('LPUSH', ready_key, candidates[j]) end
    break
  end
  local seq, gen = split_entry(entry)
  local body = redis.call('HGET', messages_key, seq)
  if body and tonumber(string.sub(body, 1, 16)) >= oldest_kept then
    local member = seq .. ':' .. (gen + 1)
    leases[#leases + 1] = deadline
    leases[#leases + 1] = member
    out[#out + 1] = seq
    out[#out + 1] = gen + 1
    out[#out + 1] = body
    bytes = bytes + #body
  elseif body then
    release_body(messages_key, refs_key, seq)
  end
end
finish_pull(leased_key, leases, out, now)
return out
