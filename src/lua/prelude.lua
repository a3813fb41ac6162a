-- Prepended to every script by src/redis/scripts.ts. Kept tiny on purpose.

-- The one clock (DESIGN.md invariant 3): the Redis server's TIME, in microseconds,
-- unless the caller passes an explicit time (tests drive time with a manual clock).
local function now_us(override)
  if override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Drops one subscription's reference to a message body; the last one deletes the body.
-- A missing refs entry means "one reference left" (saves memory on single-subscription topics).
local function release_body(messages_key, refs_key, seq)
  local refs = redis.call('HGET', refs_key, seq)
  if not refs then
    redis.call('HDEL', messages_key, seq)
  elseif tonumber(refs) <= 2 then
    redis.call('HDEL', refs_key, seq)
  else
    redis.call('HINCRBY', refs_key, seq, -1)
  end
end

-- A delivery entry is "seq" (never delivered) or "seq:gen" (last delivered as generation gen).
local function split_entry(entry)
  local colon = string.find(entry, ':', 1, true)
  if not colon then return entry, 0 end
  return string.sub(entry, 1, colon - 1), tonumber(string.sub(entry, colon + 1))
end
