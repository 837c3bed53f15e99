/**
 * The Lua scripts. Every script touches only keys that share one hash tag, so they run on Redis
 * Cluster too. KEYS: 1 lock (value = owner), 2 token counter, 3 queue (owner → arrival µs),
 * 4 queue deadlines (owner → ms after which a silent waiter is dropped).
 *
 * Fencing tokens: token = max(last + 1, server time in µs). The counter key makes tokens strictly
 * increasing while Redis runs; the clock term keeps them increasing when Redis restarts empty and
 * the counter is gone (a plain INCR would restart at 1, below a stale holder's token).
 */
const clock = `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
`;

const purgeDeadWaiters = `
local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms)
for i = 1, #dead, 1000 do
  local chunk = {unpack(dead, i, math.min(i + 999, #dead))}
  redis.call('ZREM', KEYS[3], unpack(chunk))
  redis.call('ZREM', KEYS[4], unpack(chunk))
end
`;

/**
 * Sets the token counter to `text` (the number `value`) with a ttl of `ttl` ms, or, for a value
 * ahead of the clock (lifted by a migration), until the clock has passed it plus that ttl: tokens
 * that fall back to the clock after the counter expires still exceed it.
 */
const setCounter = (value: string, text: string, ttl: string) => `
redis.call('SET', KEYS[2], ${text}, 'PX', string.format('%.0f', math.max(tonumber(${ttl}), math.floor((${value} - now_us) / 1000) + tonumber(${ttl}))))
`;

/** ARGV[7]: the least token the caller wants (a migration's hint), '0' for none. */
const grant = `
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = math.max(last + 1, now_us, tonumber(ARGV[7]))
local text = string.format('%.0f', token)
${setCounter('token', 'text', 'ARGV[5]')}
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
`;

/**
 * ARGV: owner, ttlMs, wait (0|1), fifo (0|1), counter ttl ms, waiter ttl ms, least token ('0': any).
 * Returns the token as a decimal string, or false when busy (a FIFO waiter is then queued).
 */
export const ACQUIRE = `${clock}
if ARGV[4] == '1' then
${purgeDeadWaiters}
  if redis.call('EXISTS', KEYS[1]) == 0 then
    local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if head == nil or head == ARGV[1] then
${grant}
      redis.call('ZREM', KEYS[3], ARGV[1])
      redis.call('ZREM', KEYS[4], ARGV[1])
      return text
    end
  end
  if ARGV[3] == '1' then
    redis.call('ZADD', KEYS[3], 'NX', now_us, ARGV[1])
    redis.call('ZADD', KEYS[4], now_ms + tonumber(ARGV[6]), ARGV[1])
    redis.call('PEXPIRE', KEYS[3], ARGV[6])
    redis.call('PEXPIRE', KEYS[4], ARGV[6])
  end
  return false
end
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
${grant}
return text
`;

/** ARGV: owner, ttlMs. Returns 1 when extended, 0 when the key is gone or someone else's. */
export const RENEW = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`;

/**
 * ARGV: owner, channel, lock key name (for the message), fifo (0|1). Deletes the lock if it is ours and drops
 * our queue entry (a waiter giving up uses the same script). When the lock is free afterwards and
 * we freed it or left the queue, publishes "<lock key>\\n<next owner or empty>" so the next waiter
 * tries at once.
 */
export const RELEASE = `
local left = 0
if ARGV[4] == '1' then
  left = redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
end
local freed = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  freed = 1
end
if freed == 1 or (left == 1 and redis.call('EXISTS', KEYS[1]) == 0) then
  local head = ''
  if ARGV[4] == '1' then head = redis.call('ZRANGE', KEYS[3], 0, 0)[1] or '' end
  redis.call('PUBLISH', ARGV[2], ARGV[3] .. '\\n' .. head)
end
return freed
`;

/**
 * ARGV: owner, floor (decimal), counter ttl ms. Raises the token
 * counter to `floor` if the lock is still ours (any later grant would have replaced our owner).
 * Returns 1 when raised (or already higher), 0 when not ours.
 */
export const RAISE_FLOOR = `${clock}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local floor = tonumber(ARGV[2])
if floor > tonumber(redis.call('GET', KEYS[2]) or '0') then
${setCounter('floor', 'ARGV[2]', 'ARGV[3]')}
end
return 1
`;
