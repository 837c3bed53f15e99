/**
 * The Lua scripts. Every script touches only keys that share one hash tag, so they run on Redis
 * Cluster too.
 *
 * Mutex keys: 1 lock, 2 fence (a stream whose last entry id is the last token), 3 queue (member →
 * arrival µs), 4 queue deadlines (member → ms after which a silent waiter is dropped). A queue
 * member is `<owner>|<backend id>`: the backend id names the one subscriber channel
 * (`<prefix>w:<backend id>`) that a message for this waiter goes to.
 *
 * The lock key has two forms:
 * - plain, `<owner>`, with the lease as its expiry: nobody waits, so acquire is `SET NX PX` plus
 *   the token, renew `GET` + `PEXPIRE`, release `GET` + `DEL`, with no clock read, no queue and no
 *   message;
 * - queued, `<owner>|<token>|<lease end, server ms>`, written by the first waiter that joins: the
 *   lease is judged by the end in the value, and the key's own expiry is stretched over every
 *   waiter's deadline (`PEXPIRE … GT`), so the key exists while anybody waits and a newcomer's
 *   `SET NX` can never slip past the queue. A release then hands the key to the queue's head itself
 *   (FIFO) and sends one message to the head's process; the head's next attempt confirms it.
 *
 * Fencing tokens come from `XADD` on the fence stream: an entry id is `<server ms>-<seq>`, larger
 * than the stream's last id even when the clock stands still or steps back, and it starts from the
 * server clock when the stream is new (first use, or Redis restarted empty), so tokens keep rising
 * across an empty restart without any counter surviving. Token = ms × 1000 + seq (seq kept below
 * 1000), the scale of a microsecond clock.
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

/**
 * Sets the token counter to `text` (the number `value`) with a ttl of `ttl` ms, or, for a value
 * ahead of the clock (lifted by a migration), until the clock has passed it plus that ttl: tokens
 * that fall back to the clock after the counter expires still exceed it.
 */
const setCounter = (value: string, text: string, ttl: string) => `
redis.call('SET', KEYS[2], ${text}, 'PX', string.format('%.0f', math.max(tonumber(${ttl}), math.floor((${value} - now_us) / 1000) + tonumber(${ttl}))))
`;

/**
 * The mutex's shared functions. ARGV layout of every mutex script: 1 owner, 2 ttl ms, 3 wait
 * (0|1), 4 fifo (0|1), 5 queue member, 6 waiter ttl ms, 7 least token as a fence id ('' for none),
 * 8 fence ttl ms, 9 channel prefix, 10 lock key name (sent in messages).
 */
const mutex = `
local function server_ms()
  if redis.replicate_commands then redis.replicate_commands() end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- PEXPIRE that only ever lengthens (GT), or sets a first expiry (NX: GT counts none as infinite).
local function stretch(key, ms)
  if redis.call('PEXPIRE', key, ms, 'GT') == 0 then redis.call('PEXPIRE', key, ms, 'NX') end
end

-- The stream's id as a token, with seq kept below 1000 (one past it moves to the next ms).
local function token_of(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if tonumber(seq) < 1000 then return ms .. string.format('%03d', tonumber(seq)) end
  local next = string.format('%.0f', tonumber(ms) + 1)
  redis.call('XADD', KEYS[2], 'MAXLEN', '1', next .. '-0', 't', '')
  return next .. '000'
end

-- The next token. A new stream starts one ms ahead of the clock: past every id a stream that
-- expired or was lost in this very ms could have handed out. Its ttl is set once, when it is made.
local function fence()
  if ARGV[7] ~= '' then
    local raised = redis.pcall('XADD', KEYS[2], 'MAXLEN', '1', ARGV[7], 't', '')
    if type(raised) ~= 'table' then
      local ms = tonumber(string.match(ARGV[7], '^(%d+)'))
      redis.call('PEXPIRE', KEYS[2], string.format('%.0f', math.max(0, ms - server_ms()) + tonumber(ARGV[8])))
      return token_of(raised)
    end
  end
  local id = redis.call('XADD', KEYS[2], 'NOMKSTREAM', 'MAXLEN', '1', '*', 't', '')
  if not id then
    id = redis.call('XADD', KEYS[2], 'MAXLEN', '1', string.format('%.0f', server_ms() + 1) .. '-0', 't', '')
    redis.call('PEXPIRE', KEYS[2], ARGV[8])
  end
  return token_of(id)
end

-- A queued-form value: holder, token, lease end (server ms). nil for a plain value.
local function parse(v)
  local holder, token, ends = string.match(v, '^([^|]*)|([^|]*)|(%d+)$')
  if holder == nil then return nil end
  return holder, token, tonumber(ends)
end

-- Stretches the lock key's expiry over \`ends\` and every waiter's deadline.
local function cover(now, ends)
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')[2]
  local until_ms = math.max(ends, tonumber(last or '0'))
  redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.max(1, until_ms - now)), 'GT')
end

local function enqueue(now, now_us)
  redis.call('ZADD', KEYS[3], 'NX', now_us, ARGV[5])
  local deadline = now + tonumber(ARGV[6])
  redis.call('ZADD', KEYS[4], deadline, ARGV[5])
  stretch(KEYS[3], ARGV[6])
  stretch(KEYS[4], ARGV[6])
  redis.call('PEXPIRE', KEYS[1], ARGV[6], 'GT')
end

-- The key is free (released, or its holder's lease ended): FIFO gives it to the queue's live head
-- (with the head's own deadline as a provisional lease end, which the head's confirming attempt
-- turns into its ttl); unordered leaves it free for whoever asks first. Either way one message
-- goes to the head's process, naming the head. With nobody queued the key goes.
local function hand_over(now)
  local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  for i = 1, #dead, 1000 do
    local chunk = {unpack(dead, i, math.min(i + 999, #dead))}
    redis.call('ZREM', KEYS[4], unpack(chunk))
    redis.call('ZREM', KEYS[3], unpack(chunk))
  end
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if head == nil then
    redis.call('DEL', KEYS[1])
    return
  end
  local owner, backend = string.match(head, '^(.*)|([^|]*)$')
  if ARGV[4] == '1' then
    local deadline = tonumber(redis.call('ZSCORE', KEYS[4], head))
    local token = fence()
    redis.call('ZREM', KEYS[3], head)
    redis.call('ZREM', KEYS[4], head)
    redis.call('SET', KEYS[1], owner .. '|' .. token .. '|' .. string.format('%.0f', deadline), 'KEEPTTL')
    cover(now, deadline)
  else
    redis.call('SET', KEYS[1], '|0|0', 'KEEPTTL')
  end
  redis.call('PUBLISH', ARGV[9] .. backend, ARGV[10] .. '\\n' .. owner)
end
`;

/**
 * One attempt. ARGV: see `mutex`; ARGV[11] is 1 when this waiter may already be queued. Returns
 * the token as a decimal string, or false when busy (a waiter is then queued).
 */
export const ACQUIRE = `${mutex}
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local token = fence()
  if ARGV[11] == '1' and redis.call('ZREM', KEYS[3], ARGV[5]) == 1 then
    -- Only after the store forgot a holder with others queued (the key outlives every waiter).
    redis.call('ZREM', KEYS[4], ARGV[5])
    if redis.call('ZCARD', KEYS[3]) > 0 then
      local now = server_ms()
      redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token .. '|' .. string.format('%.0f', now + tonumber(ARGV[2])), 'KEEPTTL')
      cover(now, now)
    end
  end
  return token
end
${clock}
local v = redis.call('GET', KEYS[1])
local holder, token, ends = parse(v)
if holder == nil then
  holder, token, ends = v, '', now_ms + redis.call('PTTL', KEYS[1])
end
if holder == ARGV[1] and ends > now_ms then
  -- Handed to us on a release: the lease counts from now.
  redis.call('SET', KEYS[1], holder .. '|' .. token .. '|' .. string.format('%.0f', now_ms + tonumber(ARGV[2])), 'KEEPTTL')
  redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
  return token
end
if ends > now_ms then
  if ARGV[3] == '1' then
    if string.find(v, '|', 1, true) == nil then
      redis.call('SET', KEYS[1], holder .. '||' .. string.format('%.0f', ends), 'KEEPTTL')
    end
    enqueue(now_ms, now_us)
  end
  return false
end
-- Free: the holder's lease ended (or the key was left free for anyone, unordered).
${purgeExpired('KEYS[4]', [['ZREM', 'KEYS[3]']])}
local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if ARGV[4] == '1' and head ~= nil and head ~= ARGV[5] then
  hand_over(now_ms)
  if ARGV[3] == '1' then enqueue(now_ms, now_us) end
  return false
end
local granted = fence()
redis.call('ZREM', KEYS[3], ARGV[5])
redis.call('ZREM', KEYS[4], ARGV[5])
if redis.call('ZCARD', KEYS[3]) > 0 then
  local lease_end = now_ms + tonumber(ARGV[2])
  redis.call('SET', KEYS[1], ARGV[1] .. '|' .. granted .. '|' .. string.format('%.0f', lease_end), 'KEEPTTL')
  cover(now_ms, lease_end)
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return granted
`;

/** ARGV: see `mutex` (1 owner, 2 ttl ms). Returns 1 when extended, 0 when the lease is lost. */
export const RENEW = `${mutex}
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not v then return 0 end
local holder, token, ends = parse(v)
if holder ~= ARGV[1] then return 0 end
local now = server_ms()
if ends <= now then return 0 end
redis.call('SET', KEYS[1], holder .. '|' .. token .. '|' .. string.format('%.0f', now + tonumber(ARGV[2])), 'KEEPTTL')
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
return 1
`;

/**
 * ARGV: see `mutex`. Gives the lock up if it is ours and drops our queue entry (a waiter giving up
 * uses the same script). A queued-form lock goes to the next waiter. Returns 1 when it was ours.
 */
export const RELEASE = `${mutex}
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if not v then
  if redis.call('ZREM', KEYS[3], ARGV[5]) == 1 then redis.call('ZREM', KEYS[4], ARGV[5]) end
  return 0
end
local holder, token, ends = parse(v)
if holder == nil then
  if redis.call('ZREM', KEYS[3], ARGV[5]) == 1 then redis.call('ZREM', KEYS[4], ARGV[5]) end
  return 0
end
local now = server_ms()
if holder == ARGV[1] then
  if ends > now then
    hand_over(now)
    return 1
  end
  holder = ''
end
if redis.call('ZREM', KEYS[3], ARGV[5]) == 1 then redis.call('ZREM', KEYS[4], ARGV[5]) end
-- A waiter left: if the key is free meanwhile, the next waiter is owed it.
if holder == '' or ends <= now then hand_over(now) end
return 0
`;

/**
 * ARGV: see `mutex` (1 owner, 7 the floor as a fence id, 8 fence ttl ms). Moves the fence stream
 * to the floor if the lock is still ours (any later grant would have replaced our owner) and the
 * stream is below it; the stream then lives until the clock has passed the floor plus its ttl.
 * Returns 1 when raised (or already higher), 0 when not ours.
 */
export const RAISE_FLOOR = `${mutex}
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local holder, token, ends = parse(v)
local now = server_ms()
if holder == nil then holder, ends = v, now + 1 end
if holder ~= ARGV[1] or ends <= now then return 0 end
if type(redis.pcall('XADD', KEYS[2], 'MAXLEN', '1', ARGV[7], 't', '')) ~= 'table' then
  local ms = tonumber(string.match(ARGV[7], '^(%d+)'))
  redis.call('PEXPIRE', KEYS[2], string.format('%.0f', math.max(0, ms - now) + tonumber(ARGV[8])))
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
