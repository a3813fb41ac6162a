--[[
  acknowledge-and-publish: acknowledges deliveries of one subscription and publishes to its own
  topic incarnation, all or nothing (src/broker/ack-and-publish.ts, where every key shares the
  topic's hash tag). The leases are checked as modify-ack-deadline's hold checks them; then each
  publish runs publish.lua and the acknowledgement acknowledge.lua or acknowledge-ordered.lua, as
  steps: src/redis/scripts.ts puts each of those scripts, prelude and all, into a function
  step_<name>(KEYS, ARGV) ahead of this one, so a step does what the script does alone, on the
  KEYS and ARGV its wrapper builds. A step's KEYS come as positions in KEYS (a key several steps
  use is passed once).
  KEYS[1]    subscription config (HASH: exactlyOnce "1"|"0")
  KEYS[2]    leases (ZSET "seq:gen" -> deadline in microseconds)
  KEYS[3]    keyed ZSET (empty without ordering)
  KEYS[4]    keyed deliveries (HASH seq -> keyed delivery "gen|state|key", see split_keyed_delivery
             in prelude.lua; empty without ordering)
  KEYS[5..]  the steps' other keys
  ARGV[1]    time override in microseconds, or '' for Redis TIME: the one time of the call, which
             replaces each step's own ARGV[1] (every script's time override), so that a lease
             found current is still current when it is acknowledged
  ARGV[2]    '1': refuse after the lease check, whatever it finds (the call also names ack IDs of no
             delivery here), else ''
  ARGV[3]    m, the number of deliveries
  ARGV[4..]  the m distinct deliveries "seq:gen", in request order; then the acknowledgement: its
             script ('acknowledge' or 'acknowledge-ordered') and its step; then p, the number of
             publishes, and the step of each; then the bodies of every publish, in order. A step:
             the number of its KEYS and their positions in KEYS, the number of its ARGV before
             any body and those ARGV, the number of its bodies (which follow its ARGV).
  Returns    {REPLY_NO_SUBSCRIPTION}          the subscription is not attached here
             {REPLY_LEASES_REFUSED, codes}    not every lease is current (or ARGV[2]): per delivery,
                                              as modify-ack-deadline's hold answers, DELIVERY_APPLIED,
                                              DELIVERY_GONE, DELIVERY_EXPIRED or DELIVERY_OUT_OF_ORDER
             {REPLY_PUBLISH_REFUSED, reply}   the first publish refused: publish.lua's reply
             {REPLY_OK, acknowledged, published, ...}  the acknowledgement's reply (every code
                                              DELIVERY_APPLIED), then each publish's reply
             On every answer but {REPLY_OK, ...} nothing was written.
  Invariant: the acknowledgements take effect if and only if the messages are published: each
             lease was current at the call's time, and nothing runs between the steps. A publish
             refuses only before it writes, and a later publish refuses only where the first does,
             as long as only the first schedules messages (the broker sends a call whose later
             publishes schedule some as three scripts instead).
]]
local now = now_us(ARGV[1])
local time = string.format('%.0f', now)
local exactly_once = exactly_once_mode(KEYS[1])
if exactly_once == nil then return {REPLY_NO_SUBSCRIPTION} end

local deliveries = tonumber(ARGV[3])
local members = {}
for i = 1, deliveries do members[i] = ARGV[3 + i] end
local leases = { leased = KEYS[2], keyed = KEYS[3], deliveries = KEYS[4] }
local codes = strict_lease_codes(leases, members, 1, now, exactly_once)
local refused = ARGV[2] == '1'
for _, code in ipairs(codes) do
  if code ~= DELIVERY_APPLIED then refused = true end
end
if refused then return {REPLY_LEASES_REFUSED, codes} end

-- The steps, read in order from ARGV[4 + m].
local at = 4 + deliveries
local function take()
  at = at + 1
  return ARGV[at - 1]
end
local function take_step()
  local keys, args = {}, {}
  for i = 1, tonumber(take()) do keys[i] = KEYS[tonumber(take())] end
  for i = 1, tonumber(take()) do args[i] = take() end
  args[1] = time
  return { keys = keys, args = args, bodies = tonumber(take()) }
end
local acknowledge = take() == 'acknowledge-ordered' and step_acknowledge_ordered or step_acknowledge
local acknowledgement = take_step()
local publishes = {}
for p = 1, tonumber(take()) do publishes[p] = take_step() end
for _, publish in ipairs(publishes) do
  for _ = 1, publish.bodies do publish.args[#publish.args + 1] = take() end
end

local replies = { REPLY_OK, false }
for _, publish in ipairs(publishes) do
  local reply = step_publish(publish.keys, publish.args)
  if reply[1] ~= REPLY_OK then return {REPLY_PUBLISH_REFUSED, reply} end
  replies[#replies + 1] = reply
end
replies[2] = acknowledge(acknowledgement.keys, acknowledgement.args)
return replies
