--[[
  publish-batch: several publishes to one topic incarnation that the broker sent together (one
  turn of its event loop: src/redis/calls/publish-batch.ts), each stored as publish.lua alone
  stores it, one after another in their order. src/redis/scripts.ts puts publish.lua into a
  function step_publish(KEYS, ARGV) ahead of this one, so each step does what the script does
  alone on its own ARGV; they share its KEYS: the batch's publishes were sent against the same
  attached subscriptions, none schedules a message and none is staged (the staging key, one of the
  KEYS, goes unused).
  KEYS[1..]  publish.lua's KEYS, the same for every publish of the batch
  ARGV[1]    n, the number of publishes
  ARGV[2..]  for each publish in order, how many of publish.lua's ARGV it has before its bodies
             (a), then those a ARGV; then the bodies of every publish, in order (the message
             count among each publish's ARGV says how many are its)
  Returns    {reply1, reply2, ...}   per publish, publish.lua's reply (REPLY_OK with its seqs,
                                     or a refusal: REPLY_TOPIC_DELETED, REPLY_ATTACHMENTS_CHANGED,
                                     REPLY_STAMP_REFUSED, REPLY_FORWARDED_BEFORE,
                                     REPLY_PAST_RETENTION), or its error
  Invariant: each publish is stored or refused exactly as publish.lua alone would store or refuse
             it, run at the script's time (one reading of the clock for all, unless the broker
             passed a time): a refusal writes nothing, so it leaves the publishes after it as they
             would be without it, and nothing runs between the steps. Only publishes write holds
             flags, so writing each block's once after the last step leaves them as the steps
             would have; the wake channel gets one PUBLISH per batch, of the sum of the counts
             each publish would have sent alone.
]]
local publishes = tonumber(ARGV[1])
local steps, at = {}, 2
for p = 1, publishes do
  local argc = tonumber(ARGV[at])
  steps[p] = { unpack(ARGV, at + 1, at + argc) }
  at = at + argc + 1
end
for _, args in ipairs(steps) do
  for _ = 1, tonumber(args[10]) do
    args[#args + 1] = ARGV[at]
    at = at + 1
  end
end
if at ~= #ARGV + 1 then
  return redis.error_reply('publish-batch: ARGV does not hold the bodies its publishes count')
end

-- One reading of the clock for all of them, each block's holds flags written once, and one
-- wake-up per channel.
local time = string.format('%.0f', now_us(''))
gathered_wakes, gathered_holds = {}, {}
local replies = {}
for p, args in ipairs(steps) do
  if args[1] == '' then args[1] = time end
  replies[p] = step_publish(KEYS, args)
end
write_gathered_holds()
for channel, count in pairs(gathered_wakes) do redis.call('PUBLISH', channel, count) end
return replies
