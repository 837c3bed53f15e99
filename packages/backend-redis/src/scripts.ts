/**
 * The Lua scripts. Every script touches only keys that share one hash tag, so they run on Redis
 * Cluster too. Long, over half of it comments: each script's keys, arguments and
 * replies are spelled out beside it, since nothing else checks them.
 *
 * Mutex keys: 1 lock, 2 token counter, 3 queue (member → arrival µs), 4 queue deadlines (member →
 * ms after which a silent waiter is dropped). A queue member is `<owner>|<backend id>`: the
 * backend id names the one subscriber channel (`<prefix>w:<backend id>`) that a message for this
 * waiter goes to.
 *
 * The lock key has two forms:
 * - plain, `<owner>`, with the lease as its expiry, while nobody waits: acquire is `SET NX PX` plus
 *   the token, renew `GET` + `PEXPIRE`, release `GET` + `DEL`; no queue, no message;
 * - queued, `<owner>|<token>|<lease end, server ms>`, written by the first waiter that joins: the
 *   lease is judged by the end in the value, and the key's own expiry is stretched over every
 *   waiter's deadline (`PEXPIRE … GT`), so the key exists while anybody waits and a newcomer's
 *   `SET NX` can never slip past the queue. A release then hands the key to the queue's head itself
 *   (FIFO) and sends one message, to the head's process, carrying its token: that message is the
 *   head's grant (no request of its own), or, lost, the head's next attempt finds the grant.
 * Each script's common case comes first, before any function is defined, so it pays for nothing else.
 *
 * Fencing tokens: token = max(last + 1, server time in µs). The counter key makes tokens strictly
 * increasing while Redis runs; the clock term keeps them increasing when Redis restarts empty or
 * fails over to a replica that missed the last grants (a plain INCR would repeat them).
 */

/**
 * A Lua expression: the channel of the backend whose id is the Lua expression `id`,
 * `<prefix>w:<id>` (the prefix is every key's, up to its hash tag), as the store subscribes to it.
 */
const backendChannel = (id: string) => `string.match(KEYS[1], '^(.-){') .. 'w:' .. ${id}`;

/** The token counter outlives its last grant by this much; after that tokens fall back to the server clock. */
export const COUNTER_TTL_MS = 24 * 60 * 60 * 1000;

/**
 * How long the token counter is kept for the number `value` (a Lua expression): `ttl` ms, or, for
 * a value ahead of the clock (a lifted floor, a least token asked for), until the clock has passed
 * it plus that ttl, so tokens that fall back to the clock after the counter expires still exceed it.
 */
const counterPx = (value: string, ttl: string) =>
  `string.format('%.0f', math.max(tonumber(${ttl}), math.floor((${value} - now_us) / 1000) + tonumber(${ttl})))`;

/**
 * The next token, in `name` (a decimal string), given `now_us` (and `now_text`, the same as
 * digits, when the caller has it): the larger of the clock and `least` (a Lua expression for the
 * least token wanted, 0 for none), written to the counter and the old value read in one command;
 * only when the counter already stood at or above it (a lifted floor, a clock that stepped back)
 * is it written again, one above. The common case (no least token above the clock) computes
 * nothing more than the clock's digits.
 */
const nextToken = (name: string, least: string, nowText = "string.format('%.0f', now_us)") => `
local ${name}, ${name}_n, ${name}_px = ${nowText}, now_us, '${COUNTER_TTL_MS}'
if ${least} > now_us then
  ${name}_n = ${least}
  ${name} = string.format('%.0f', ${name}_n)
  ${name}_px = ${counterPx(`${name}_n`, String(COUNTER_TTL_MS))}
end
local ${name}_last = redis.call('SET', KEYS[2], ${name}, 'PX', ${name}_px, 'GET')
if ${name}_last and tonumber(${name}_last) >= ${name}_n then
  ${name}_n = tonumber(${name}_last) + 1
  ${name} = string.format('%.0f', ${name}_n)
${setCounter(`${name}_n`, name, String(COUNTER_TTL_MS))}
end
`;

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

/** Sets the token counter to `text` (the number `value`), kept for `counterPx`. */
const setCounter = (value: string, text: string, ttl: string) => `
redis.call('SET', KEYS[2], ${text}, 'PX', ${counterPx(value, ttl)})
`;

/**
 * Functions the mutex scripts share (defined after each script's common case). ARGV of acquire and
 * release: 1 owner, 2 ttl ms ('0' for a release), 3 the options in one string (each argument
 * costs the server a little on every call, and only the uncommon cases read these):
 * `<fast><mode><fifo>|<backend id>|<waiter ttl ms>|<least token>`, where fast is `+` when the
 * common case may be tried, `*` when it may and a least token is given (`-` otherwise), mode 0
 * one attempt, 1 a waiter's first attempt, 2 a queued waiter's; fifo 0|1; least token '0' for
 * none. Guarded acquire: 4 guard ms.
 */
const mutex = `
local mode, fifo, backend_id, waiter_ttl, least = string.match(ARGV[3], '^.(.)(.)|([^|]*)|(%d+)|(%d+)$')

local function server_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- PEXPIRE that only ever lengthens (GT), or sets a first expiry (NX: GT counts none as infinite).
-- \`new\`: the key is likely new (no expiry yet), so NX is tried first; either order does the same.
-- Returns whether the first try set it.
local function stretch(key, ms, new)
  local first, second = 'GT', 'NX'
  if new then first, second = 'NX', 'GT' end
  if redis.call('PEXPIRE', key, ms, first) == 1 then return true end
  redis.call('PEXPIRE', key, ms, second)
  return false
end

local function fence(now_us)
${nextToken('token', 'tonumber(least)')}
  return token
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

local member = ARGV[1] .. '|' .. backend_id

-- Drops the waiters whose deadline has passed.
local function purge(now_ms)
${purgeExpired('KEYS[4]', [['ZREM', 'KEYS[3]']])}
end

-- Joins the queue or refreshes our place; returns our place (0: the head) and our new deadline.
-- \`first\`: we are the first waiter (the lock key was in its plain form), so the queue is most
-- likely new.
local function enqueue(now, now_us, first)
  local deadline = now + tonumber(waiter_ttl)
  redis.call('ZADD', KEYS[3], 'NX', now_us, member)
  redis.call('ZADD', KEYS[4], deadline, member)
  -- The queue gets its expiry in the step that creates it, so one that had none was made just now,
  -- by our ZADD: we are all of it.
  local alone = stretch(KEYS[3], waiter_ttl, first) and first
  stretch(KEYS[4], waiter_ttl, first)
  redis.call('PEXPIRE', KEYS[1], waiter_ttl, 'GT')
  if alone then return {0, deadline} end
  return {redis.call('ZRANK', KEYS[3], member), deadline}
end

local function leave()
  if redis.call('ZREM', KEYS[3], member) == 1 then redis.call('ZREM', KEYS[4], member) end
end

-- The queue's first live member and its deadline (nil when nobody waits). Waiters whose deadline
-- has passed are dropped when one of them is at the head, where it would be handed the key;
-- further back they cost nothing until they get there, so the common case is two reads.
local function live_head(now)
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if head == nil then return nil end
  local deadline = tonumber(redis.call('ZSCORE', KEYS[4], head))
  if deadline ~= nil and deadline > now then return head, deadline end
  purge(now)
  head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if head == nil then return nil end
  return head, tonumber(redis.call('ZSCORE', KEYS[4], head))
end

-- The key is free (released, or its holder's lease ended): FIFO gives it to the queue's live head,
-- its lease ending at the head's own deadline (see RedisBackend's #handedLease), and the message
-- to the head's process names the head, its token and that deadline (the lock key, a newline, then
-- \`<owner> <token> <deadline>\`); unordered leaves the key free for whoever asks first, and the
-- message names only the head (the lock key, a newline, the owner). With nobody queued the key
-- goes. When the lock key \`existed\`, its expiry already covers every waiter's deadline (a waiter
-- stretches it whenever it joins or keeps its place), so the new value keeps that expiry as it is.
local function hand_over(now, now_us, existed, head, deadline)
  if head == nil then
    redis.call('DEL', KEYS[1])
    return
  end
  local owner, backend = string.match(head, '^(.*)|([^|]*)$')
  local message = KEYS[1] .. '\\n' .. owner
  if fifo == '1' then
    local token = fence(now_us)
    local ends = string.format('%.0f', deadline)
    redis.call('ZREM', KEYS[3], head)
    redis.call('ZREM', KEYS[4], head)
    redis.call('SET', KEYS[1], owner .. '|' .. token .. '|' .. ends, 'KEEPTTL')
    message = message .. ' ' .. token .. ' ' .. ends
  else
    redis.call('SET', KEYS[1], '|0|0', 'KEEPTTL')
  end
  if not existed then cover(now, deadline or 0) end
  redis.call('PUBLISH', ${backendChannel('backend')}, message)
end
`;

/**
 * One attempt (ARGV: see `mutex`). Returns the token as a decimal string; when busy, a waiter's
 * place in the queue it joined (0: the head) and its new deadline (server ms), or false for a
 * one-shot attempt.
 */
export const ACQUIRE = `
local fast = string.byte(ARGV[3])
if fast ~= 45 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local t = redis.call('TIME')
  -- The clock as digits straight from TIME's seconds and microseconds: no float formatting.
  local now_text = t[1] .. string.sub('00000' .. t[2], -6)
  local now_us = tonumber(now_text)
  local least = 0
  if fast == 42 then least = tonumber(string.match(ARGV[3], '(%d+)$')) end
${nextToken('token', 'least', 'now_text')}
  return token
end
${mutex}
local now_us = server_us()
local now = math.floor(now_us / 1000)
local v = redis.call('GET', KEYS[1])
local holder, token, ends
if v then
  holder, token, ends = parse(v)
  if holder == nil then holder, token, ends = v, '', now + redis.call('PTTL', KEYS[1]) end
else
  holder, token, ends = '', '', 0
end
if holder == ARGV[1] and ends > now then
  -- Handed to us on a release, or granted to an earlier attempt of ours whose answer never came
  -- (no token in the value: a plain grant's token went out only in that answer, so we take a new
  -- one, above it). The lease counts from now.
  if token == '' then token = fence(now_us) end
  redis.call('SET', KEYS[1], holder .. '|' .. token .. '|' .. string.format('%.0f', now + tonumber(ARGV[2])), 'KEEPTTL')
  redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
  return token
end
if ends > now then
  if mode == '0' then return false end
  local plain = string.find(v, '|', 1, true) == nil
  if plain then
    redis.call('SET', KEYS[1], holder .. '||' .. string.format('%.0f', ends), 'KEEPTTL')
  end
  return enqueue(now, now_us, plain)
end
-- Free: nobody holds it, its holder's lease ended, or it was left free for anyone (unordered).
local head, deadline = live_head(now)
if fifo == '1' and head ~= nil and head ~= member then
  hand_over(now, now_us, v ~= nil, head, deadline)
  if mode == '0' then return false end
  return enqueue(now, now_us)
end
local granted = fence(now_us)
leave()
if redis.call('ZCARD', KEYS[3]) > 0 then
  local lease_end = now + tonumber(ARGV[2])
  redis.call('SET', KEYS[1], ARGV[1] .. '|' .. granted .. '|' .. string.format('%.0f', lease_end), 'PX', ARGV[2])
  cover(now, lease_end)
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return granted
`;

/**
 * ACQUIRE behind the restart guard. KEYS 5 birth mark, 6 guard; ARGV[4] guard ms. A node with
 * neither lost its data (or is new): it is marked, and refuses every grant until the guard
 * expires, by when every lease it may have forgotten has ended. Checked in the grant's own step,
 * so no grant can slip in between a restart and the check.
 */
export const GUARDED_ACQUIRE = `
local marks = redis.call('EXISTS', KEYS[5], KEYS[6])
if marks ~= 1 then
  if marks == 0 then
    redis.call('SET', KEYS[5], '1')
    redis.call('SET', KEYS[6], '1', 'PX', ARGV[4])
  end
  return false
end
${ACQUIRE}`;

/** ARGV: 1 owner, 2 ttl ms. Returns 1 when extended, 0 when the lease is lost. */
export const RENEW = `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not v then return 0 end
local holder, token, ends = string.match(v, '^([^|]*)|([^|]*)|(%d+)$')
if holder ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(ends) <= now then return 0 end
redis.call('SET', KEYS[1], holder .. '|' .. token .. '|' .. string.format('%.0f', now + tonumber(ARGV[2])), 'KEEPTTL')
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
return 1
`;

/**
 * ARGV: see `mutex` (1 owner, 3 the options). Gives the lock up if it is ours and drops our
 * queue entry (a waiter giving up uses the same script). A queued-form lock goes to the next
 * waiter. Returns 1 when it was ours.
 */
export const RELEASE = `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
${mutex}
if not v then
  leave()
  return 0
end
local holder, token, ends = parse(v)
if holder == nil then
  leave()
  return 0
end
local now_us = server_us()
local now = math.floor(now_us / 1000)
if holder == ARGV[1] and ends > now then
  hand_over(now, now_us, true, live_head(now))
  return 1
end
leave()
-- A waiter left, or a lease that had ended was given back: if the key is free, the next waiter is owed it.
if holder == '' or ends <= now then hand_over(now, now_us, true, live_head(now)) end
return 0
`;

/**
 * ARGV: 1 owner, 2 floor (decimal). Raises the token counter to the floor if the lock is still
 * ours (any later grant would have replaced our owner). Returns 1 when raised (or already
 * higher), 0 when not ours.
 */
export const RAISE_FLOOR = `${clock}
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local holder, token, ends = string.match(v, '^([^|]*)|([^|]*)|(%d+)$')
if holder == nil then holder, ends = v, now_ms + 1 end
if holder ~= ARGV[1] or tonumber(ends) <= now_ms then return 0 end
local floor = tonumber(ARGV[2])
if floor > tonumber(redis.call('GET', KEYS[2]) or '0') then
${setCounter('floor', 'ARGV[2]', String(COUNTER_TTL_MS))}
end
return 1
`;

/**
 * KEYS: 1 the store's token floor (`LockBackend.tokenFloor`). ARGV: 1 the floor to raise it to
 * (decimal, '0' to read). Returns the floor as it stands. Kept without an expiry: it bounds the
 * tokens of keys nobody has used yet, however long they wait.
 */
export const TOKEN_FLOOR = `
local floor = redis.call('GET', KEYS[1]) or '0'
if tonumber(ARGV[1]) > tonumber(floor) then
  redis.call('SET', KEYS[1], ARGV[1])
  return ARGV[1]
end
return floor
`;

/*
 * Shared claims (semaphores, read-write locks; the rule in core's `Claim`). KEYS: 1 claims
 * (owner → token, which is also the arrival order), 2 token counter, 3 expiries (owner → ms), 4
 * meta (owner → mode: 'X', 'S', or 'S|<backend id>' for a semaphore's claim, whose handed permit's
 * message goes to that backend's channel; and '#limit'). A claim's token is taken when it arrives:
 * grants happen in arrival order, so arrival tokens are increasing in grant order too.
 */
const purgeExpiredClaims = purgeExpired('KEYS[3]', [
  ['ZREM', 'KEYS[1]'],
  ['HDEL', 'KEYS[4]'],
]);

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
 * ARGV: owner, ttlMs, wait (0|1), mode (X, S, or for a semaphore's claim `S|<backend id>`: the
 * value kept in meta, whose backend id names the process a handed permit's message goes to), limit
 * (0: none), counter ttl ms, waiter ttl ms, least token ('0': any). Returns {1, token} when
 * granted; {0, needed, deadline} when not, for a waiter, which stays queued (needed: how many of the claims ahead of it must go at least before it
 * may be granted, which is as many releases; its claim lasts until the deadline, server ms); {0} for a
 * one-shot attempt, which leaves nothing; {2, stored limit} when live claims have another limit.
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
-- How many of the claims ahead must go before this one may be granted (0: it is granted now).
-- A shared claim within the limit also waits for every claim up to the last exclusive one ahead of
-- it (a read behind a write); beyond the limit, the count to the limit is enough for a waiter to
-- know when to look again (semaphores hold shared claims only).
local needed
if ARGV[4] == 'X' then
  needed = rank
else
  needed = limit > 0 and math.max(0, rank - limit + 1) or 0
  if needed == 0 and rank > 0 then
    local ahead = redis.call('ZRANGE', KEYS[1], 0, rank - 1)
    local modes = redis.call('HMGET', KEYS[4], unpack(ahead))
    for i = #modes, 1, -1 do if modes[i] == 'X' then needed = i break end end
  end
end
local ok = needed == 0
if not ok and ARGV[3] == '0' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
  if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[4]) end
  return {0}
end
local deadline = now_ms + tonumber(ok and ARGV[2] or ARGV[7])
redis.call('ZADD', KEYS[3], deadline, ARGV[1])
${keepClaimKeys}
if ok then return {1, token} end
return {0, needed, deadline}
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
 * gives up) and, when it existed, publishes one message: "<claims key>\\n" so this key's waiters
 * re-check, or, when a semaphore's permit was given back and a claim waits for one, the claim it
 * goes to: "<claims key>\\n<owner> <token> <deadline>". A semaphore (limit > 0) holds shared claims
 * only, so the claim that moves up to place limit - 1 is granted by the queue rule as it stands
 * (claims ahead of it that expired unseen only make room sooner); its claim still lasts until
 * its queue deadline, which the message carries, and its waiter may take the grant without an
 * attempt (see the store's takeHanded). That message goes to the claim's own process only (its
 * backend's channel, kept in meta), when meta names one: nobody else is let in by this release, so
 * nobody else needs it (every process would otherwise read every handoff of every semaphore).
 */
export const SHARED_RELEASE = `
local limit = tonumber(redis.call('HGET', KEYS[4], '#limit') or '0')
local rank = limit > 0 and redis.call('ZRANK', KEYS[1], ARGV[1])
local gone = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[1], KEYS[3], KEYS[4]) end
if gone == 0 then return 0 end
local message = ARGV[3] .. '\\n'
if rank and rank < limit then
  local next = redis.call('ZRANGE', KEYS[1], limit - 1, limit - 1)[1]
  if next then
    local token = redis.call('ZSCORE', KEYS[1], next)
    local deadline = redis.call('ZSCORE', KEYS[3], next) or '0'
    message = message .. next .. ' ' .. string.format('%.0f', tonumber(token)) .. ' ' .. string.format('%.0f', tonumber(deadline))
    local backend = string.match(redis.call('HGET', KEYS[4], next) or '', '^S|(.+)$')
    if backend then
      redis.call('PUBLISH', ${backendChannel('backend')}, message)
      return 1
    end
  end
end
redis.call('PUBLISH', ARGV[2], message)
return 1
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

/**
 * Inspection (reads only). Mutex: KEYS as the mutex's. Returns {lock value or '', PTTL of the lock
 * key, token counter or '', now ms, then per queued member: member, deadline ms}.
 */
export const INSPECT = `${clock}
local out = {redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '', string.format('%.0f', now_ms)}
local queue = redis.call('ZRANGE', KEYS[3], 0, -1)
for i = 1, #queue do
  out[#out + 1] = queue[i]
  out[#out + 1] = redis.call('ZSCORE', KEYS[4], queue[i]) or '0'
end
return out
`;

/**
 * Shared claims: KEYS as theirs. Returns {stored limit or '', now ms, then per claim in arrival
 * order: owner, token, expiry ms, mode (S|X)}.
 */
export const SHARED_INSPECT = `${clock}
local out = {redis.call('HGET', KEYS[4], '#limit') or '', string.format('%.0f', now_ms)}
local claims = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #claims, 2 do
  out[#out + 1] = claims[i]
  out[#out + 1] = string.format('%.0f', tonumber(claims[i + 1]))
  out[#out + 1] = redis.call('ZSCORE', KEYS[3], claims[i]) or '0'
  out[#out + 1] = redis.call('HGET', KEYS[4], claims[i]) or 'S'
end
return out
`;
