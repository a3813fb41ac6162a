--[[
  mark-log: a retainer of a topic incarnation was let go outside a record put (a dropped
  subscription or snapshot, a subscription's settings applied after its record): the janitor
  looks at the incarnation's log at its next pass, with the retention then in force.
  KEYS[1]    when the janitor next looks at each incarnation's log (ZSET uid -> µs)
  ARGV[1]    time override in microseconds, or ''
  ARGV[2]    the topic incarnation's uid
  Returns    REPLY_OK
  Invariant: the entry moves strictly below where it was, and no later than now (mark_log).
]]
mark_log(KEYS[1], ARGV[2], now_us(ARGV[1]))
return REPLY_OK
