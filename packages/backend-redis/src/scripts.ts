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

/**
 * Drops the members whose deadline (a score in `deadlines`, server ms) has passed, from `deadlines`
 * and from each of `alsoFrom` (a `[command, key]` pair: ZREM from a sorted set, HDEL from a hash),
 * a thousand at a time (Lua's unpack has a limit).
 */
const purgeExpired = (deadlines: string, alsoFrom: [string, string][]) => `
local dead = redis.call('ZRANGEBYSCORE', ${deadlines}, '-inf', now_ms)
for i = 1, #dead, 1000 do
  local chunk = {unpack(dead, i, math.min(i + 999, #dead))}
  redis.call('ZREM', ${deadlines}, unpack(chunk))
${alsoFrom.map(([command, key]) => `  redis.call('${command}', ${key}, unpack(chunk))`).join('\n')}
end
`;

const purgeDeadWaiters = purgeExpired('KEYS[4]', [['ZREM', 'KEYS[3]']]);

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

/*
 * Shared claims (semaphores, read-write locks; the rule in core's `SharedRequest`). KEYS: 1 claims
 * (owner → token, which is also the arrival order), 2 token counter, 3 expiries (owner → ms), 4
 * meta (owner → 'S' | 'X', and '#limit'). A claim's token is taken when it arrives: grants happen
 * in arrival order, so arrival tokens are increasing in grant order too.
 */
const purgeExpiredClaims = purgeExpired('KEYS[3]', [['ZREM', 'KEYS[1]'], ['HDEL', 'KEYS[4]']]);

/** The claim keys live as long as their longest claim (abandoned ones go away on their own). */
const keepClaimKeys = `
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
if last[2] then
  local ms = math.max(1, tonumber(last[2]) - now_ms + 1)
  redis.call('PEXPIRE', KEYS[1], ms)
  redis.call('PEXPIRE', KEYS[3], ms)
  redis.call('PEXPIRE', KEYS[4], ms)
end
`;

/**
 * ARGV: owner, ttlMs, wait (0|1), mode (S|X), limit (0: none), counter ttl ms, waiter ttl ms,
 * least token ('0': any). Returns {1, token} when granted, {0} when not (a waiter stays queued;
 * a one-shot attempt leaves nothing), {2, stored limit} when live claims have another limit.
 */
export const SHARED_ACQUIRE = `${clock}
${purgeExpiredClaims}
local limit = tonumber(ARGV[5])
local token = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not token then
  if redis.call('ZCARD', KEYS[1]) > 0 then
    local stored = tonumber(redis.call('HGET', KEYS[4], '#limit') or ARGV[5])
    if stored ~= limit then return {2, tostring(stored)} end
  end
  local last = tonumber(redis.call('GET', KEYS[2]) or '0')
  local next = math.max(last + 1, now_us, tonumber(ARGV[8]))
  token = string.format('%.0f', next)
${setCounter('next', 'token', 'ARGV[6]')}
  redis.call('ZADD', KEYS[1], token, ARGV[1])
  redis.call('HSET', KEYS[4], ARGV[1], ARGV[4], '#limit', ARGV[5])
else
  token = string.format('%.0f', tonumber(token))
end
local rank = redis.call('ZRANK', KEYS[1], ARGV[1])
local ok
if ARGV[4] == 'X' then
  ok = rank == 0
else
  ok = limit == 0 or rank < limit
  if ok and rank > 0 then
    local ahead = redis.call('ZRANGE', KEYS[1], 0, rank - 1)
    local modes = redis.call('HMGET', KEYS[4], unpack(ahead))
    for i = 1, #modes do if modes[i] == 'X' then ok = false break end end
  end
end
if not ok and ARGV[3] == '0' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
  if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[4]) end
  return {0}
end
redis.call('ZADD', KEYS[3], now_ms + tonumber(ok and ARGV[2] or ARGV[7]), ARGV[1])
${keepClaimKeys}
if ok then return {1, token} end
return {0}
`;

/** ARGV: owner, ttlMs. Returns 1 when extended, 0 when the claim is gone (released, expired, forgotten). */
export const SHARED_RENEW = `${clock}
local until_ms = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not until_ms or tonumber(until_ms) <= now_ms or not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[3], now_ms + tonumber(ARGV[2]), ARGV[1])
${keepClaimKeys}
return 1
`;

/**
 * ARGV: owner, channel, claims key name (for the message). Drops the claim (also a waiter's that
 * gives up) and, when it existed, publishes "<claims key>\\n" so this key's waiters re-check.
 */
export const SHARED_RELEASE = `
local gone = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[1], KEYS[3], KEYS[4]) end
if gone == 1 then redis.call('PUBLISH', ARGV[2], ARGV[3] .. '\\n') end
return gone
`;

/** ARGV: owner, floor (decimal), counter ttl ms. RAISE_FLOOR for a shared claim: 1 when raised (the claim is live), 0 when not. */
export const SHARED_RAISE_FLOOR = `${clock}
local until_ms = redis.call('ZSCORE', KEYS[3], ARGV[1])
if not until_ms or tonumber(until_ms) <= now_ms or not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local floor = tonumber(ARGV[2])
if floor > tonumber(redis.call('GET', KEYS[2]) or '0') then
${setCounter('floor', 'ARGV[2]', 'ARGV[3]')}
end
return 1
`;
