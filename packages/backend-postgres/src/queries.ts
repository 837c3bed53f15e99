/**
 * The SQL. Every expiry is computed by the server's clock (`clock_timestamp()`, a `timestamptz`,
 * which is an absolute instant whatever a session's `TimeZone`), never the client's. `{locks}` and
 * `{waiters}` stand for the quoted table names.
 *
 * `{locks}` has one row per key, never deleted: `token` is the key's fencing counter and must
 * survive releases and restarts; `id` names the key's advisory lock in session mode. A row is free
 * when `owner` is NULL or `expires_at` has passed. `{waiters}` is the lease mode's FIFO queue: one
 * row per waiting acquisition, ordered by `arrival`, dropped when its waiter stops refreshing it.
 * `waiting` on the key's row says the queue may be non-empty: a waiter sets it whenever it queues
 * or refreshes its place, a release that finds the queue empty clears it. Being a column of the row
 * every grant and release locks, it is read in its latest committed version (unlike the queue table
 * under a statement's snapshot), so a release never misses a waiter that queued while it waited for
 * the row; and it spares the uncontended cycle any look at the queue. `{notifyHead}` wakes the
 * queue's head (see `release`).
 */
/** Params: locks table, waiters table, notify function, shared-claim function (quoted names). True when all exist. */
export const tablesExist = `SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL
  AND to_regprocedure($3 || '(bytea, text, uuid, boolean)') IS NOT NULL
  AND to_regprocedure($4 || '(bytea, uuid, float8, boolean, text, integer, float8, bigint)') IS NOT NULL AS ready`;

export const createTables = `
CREATE TABLE IF NOT EXISTS {locks} (
  lock_key bytea PRIMARY KEY,
  owner uuid,
  expires_at timestamptz,
  token bigint NOT NULL,
  id bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
  waiting boolean NOT NULL DEFAULT false
);
CREATE TABLE IF NOT EXISTS {waiters} (
  lock_key bytea NOT NULL,
  owner uuid NOT NULL,
  arrival bigint GENERATED ALWAYS AS IDENTITY,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (lock_key, owner)
);
CREATE INDEX IF NOT EXISTS {waitersOrder} ON {waiters} (lock_key, arrival);
CREATE OR REPLACE FUNCTION {notifyHead}(k bytea, channel text, leaving uuid, only_if_free boolean) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE head uuid;
BEGIN
  -- A function's statements each see what is committed when they run, not what was when the
  -- calling statement began: a waiter that queued while our release waited for the row is seen.
  IF only_if_free AND EXISTS (SELECT 1 FROM {locks} WHERE lock_key = k AND owner IS NOT NULL AND expires_at > clock_timestamp()) THEN
    RETURN false;
  END IF;
  SELECT owner INTO head FROM {waiters}
    WHERE lock_key = k AND owner <> leaving AND expires_at > clock_timestamp() ORDER BY arrival LIMIT 1;
  IF head IS NULL THEN RETURN false; END IF;
  PERFORM pg_notify(channel, encode(sha256(k), 'base64') || ' ' || head);
  RETURN true;
END $$;
-- Shared claims (semaphores, read-write locks; the rule is core's Claim). {sharedKeys} has
-- one row per shared key, never deleted: its token counter and the limit its live claims use.
-- {shared} has one row per claim, granted or waiting; its token (taken at arrival) orders the queue.
CREATE TABLE IF NOT EXISTS {sharedKeys} (
  lock_key bytea PRIMARY KEY,
  token bigint NOT NULL,
  claim_limit integer NOT NULL
);
CREATE TABLE IF NOT EXISTS {shared} (
  lock_key bytea NOT NULL,
  owner uuid NOT NULL,
  token bigint NOT NULL,
  exclusive boolean NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (lock_key, owner)
);
CREATE INDEX IF NOT EXISTS {sharedOrder} ON {shared} (lock_key, token);
-- One attempt at a shared claim: joins the queue (or refreshes its place), and reports whether the
-- claim may be granted. The key's row lock serializes attempts on one key; each statement below then
-- sees every claim committed before it. status 1: granted (val = token); 0: not (a one-shot attempt
-- leaves nothing); 2: live claims use another limit (val = that limit).
CREATE OR REPLACE FUNCTION {sharedAcquire}(k bytea, who uuid, ttl_ms float8, queue boolean, kind text, lim integer, waiter_ms float8, least_token bigint)
RETURNS TABLE (status integer, val bigint) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  now_t timestamptz := clock_timestamp();
  stored integer;
  t bigint;
  ahead bigint;
  blocked boolean;
  ok boolean;
BEGIN
  INSERT INTO {sharedKeys} (lock_key, token, claim_limit) VALUES (k, 0, lim) ON CONFLICT (lock_key) DO NOTHING;
  SELECT s.claim_limit INTO stored FROM {sharedKeys} s WHERE s.lock_key = k FOR UPDATE;
  DELETE FROM {shared} c WHERE c.lock_key = k AND c.expires_at <= now_t;
  SELECT c.token INTO t FROM {shared} c WHERE c.lock_key = k AND c.owner = who;
  IF t IS NULL THEN
    IF stored <> lim AND EXISTS (SELECT 1 FROM {shared} c WHERE c.lock_key = k) THEN
      RETURN QUERY SELECT 2, stored::bigint;
      RETURN;
    END IF;
    UPDATE {sharedKeys} s SET token = GREATEST(s.token + 1, least_token), claim_limit = lim WHERE s.lock_key = k RETURNING s.token INTO t;
    INSERT INTO {shared} (lock_key, owner, token, exclusive, expires_at) VALUES (k, who, t, kind = 'exclusive', now_t + waiter_ms * interval '1 millisecond');
  END IF;
  SELECT count(*), COALESCE(bool_or(c.exclusive), false) INTO ahead, blocked FROM {shared} c WHERE c.lock_key = k AND c.token < t;
  ok := CASE WHEN kind = 'exclusive' THEN ahead = 0 ELSE NOT blocked AND (lim = 0 OR ahead < lim) END;
  IF NOT ok AND NOT queue THEN
    DELETE FROM {shared} c WHERE c.lock_key = k AND c.owner = who;
    RETURN QUERY SELECT 0, 0::bigint;
    RETURN;
  END IF;
  UPDATE {shared} c SET expires_at = now_t + (CASE WHEN ok THEN ttl_ms ELSE waiter_ms END) * interval '1 millisecond'
    WHERE c.lock_key = k AND c.owner = who;
  RETURN QUERY SELECT CASE WHEN ok THEN 1 ELSE 0 END, t;
END $$;
`;

/** Shared claims: params as `{sharedAcquire}`'s. */
export const sharedAcquire = `SELECT status, val FROM {sharedAcquire}($1, $2, $3, $4, $5, $6, $7, $8)`;

/** Params: key, owner, ttl ms. One row = still ours. */
export const sharedRenew = `UPDATE {shared} SET expires_at = clock_timestamp() + $3::float8 * interval '1 millisecond'
  WHERE lock_key = $1 AND owner = $2 AND expires_at > clock_timestamp()`;

/**
 * Drops a claim (a release, or a waiter giving up) and, when there was one, tells this key's
 * waiters to re-check ("s:" marks a shared key's word). Params: key, owner, channel.
 */
export const sharedRelease = `WITH gone AS (DELETE FROM {shared} WHERE lock_key = $1 AND owner = $2 RETURNING 1)
  SELECT pg_notify($3, 's:' || encode(sha256($1), 'base64') || ' ') FROM gone`;

/**
 * Lease mode, the first attempt (and every one-shot attempt): the key is granted when it is free
 * and nobody is queued for it, in one statement of the same shape as the floor's. The token is one
 * more than the key's last, or the least token asked for (a migration's hint, 0 for none).
 * Params: key, owner, ttl ms, least token. Returns the token when granted.
 */
export const acquire = `
INSERT INTO {locks} AS l (lock_key, owner, expires_at, token)
VALUES ($1, $2, clock_timestamp() + $3::float8 * interval '1 millisecond', GREATEST(1, $4::bigint))
ON CONFLICT (lock_key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, token = GREATEST(l.token + 1, $4::bigint)
  WHERE (l.owner IS NULL OR l.expires_at <= clock_timestamp())
    AND (NOT l.waiting OR NOT EXISTS (SELECT 1 FROM {waiters} w WHERE w.lock_key = $1 AND w.expires_at > clock_timestamp()))
RETURNING token`;

/**
 * Lease mode, a waiter's attempt: grants the key when it is free and no live waiter is ahead of us
 * (FIFO); otherwise joins the queue or refreshes our place in it. A grant leaves the queue and drops
 * waiters that stopped refreshing. Params: key, owner, ttl ms, waiter ttl ms, least token.
 * Returns one row: the token when granted (else null), and `behind`, whether a live waiter is ahead
 * of us (a release cannot grant us before it, so we only keep our place).
 */
export const acquireQueued = `
WITH now AS (SELECT clock_timestamp() AS t),
ahead AS (
  SELECT 1 FROM {waiters} w, now WHERE w.lock_key = $1 AND w.owner <> $2 AND w.expires_at > now.t
    AND w.arrival < COALESCE((SELECT arrival FROM {waiters} WHERE lock_key = $1 AND owner = $2), 9223372036854775807)
  LIMIT 1
),
granted AS (
  INSERT INTO {locks} AS l (lock_key, owner, expires_at, token)
  SELECT $1, $2, now.t + $3::float8 * interval '1 millisecond', GREATEST(1, $5::bigint) FROM now
  WHERE NOT EXISTS (SELECT 1 FROM ahead)
  ON CONFLICT (lock_key) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, token = GREATEST(l.token + 1, $5::bigint)
    WHERE l.owner IS NULL OR l.expires_at <= clock_timestamp()
  RETURNING token
),
queued AS (
  INSERT INTO {waiters} (lock_key, owner, expires_at)
  SELECT $1, $2, now.t + $4::float8 * interval '1 millisecond' FROM now
  WHERE NOT EXISTS (SELECT 1 FROM granted)
  ON CONFLICT (lock_key, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at
),
flagged AS (
  UPDATE {locks} SET waiting = true WHERE lock_key = $1 AND NOT EXISTS (SELECT 1 FROM granted)
),
dequeued AS (
  DELETE FROM {waiters} w USING now
  WHERE w.lock_key = $1 AND EXISTS (SELECT 1 FROM granted) AND (w.owner = $2 OR w.expires_at <= now.t)
)
SELECT (SELECT token FROM granted) AS token, EXISTS (SELECT 1 FROM ahead) AS behind`;

/** Params: key, owner, ttl ms. One row = still ours. */
export const renew = `UPDATE {locks} SET expires_at = clock_timestamp() + $3::float8 * interval '1 millisecond'
  WHERE lock_key = $1 AND owner = $2 AND expires_at > clock_timestamp()`;

/**
 * A holder gives the key up (owner-checked) and, only when someone may wait, notifies the live head
 * of the queue, by name, so exactly that waiter tries at once; a queue found empty clears `waiting`.
 * Params: key, owner, channel.
 */
export const release = `
UPDATE {locks} SET owner = NULL, expires_at = NULL, waiting = waiting AND {notifyHead}($1, $3, $2, false)
WHERE lock_key = $1 AND owner = $2`;

/**
 * A waiter gives up: leaves the queue and, if it was queued and the key is free, notifies the next
 * live waiter, which may have been queued behind it (or notified in its stead). Also clears a claim
 * the waiter may hold (an attempt granted just as it gave up). Params: key, owner, channel.
 */
export const leave = `
WITH released AS (
  UPDATE {locks} SET owner = NULL, expires_at = NULL WHERE lock_key = $1 AND owner = $2 RETURNING 1
),
left_queue AS (
  DELETE FROM {waiters} WHERE lock_key = $1 AND owner = $2 RETURNING 1
)
SELECT {notifyHead}($1, $3, $2, NOT EXISTS (SELECT 1 FROM released)) AS notified
WHERE EXISTS (SELECT 1 FROM released) OR EXISTS (SELECT 1 FROM left_queue)`;

/**
 * Lifts the counter to `floor` unless the key was granted to someone else since (which would have
 * replaced our owner). Params: key, owner, floor. One row = raised.
 */
export const raiseFloor = `UPDATE {locks} SET token = GREATEST(token, $3::bigint) WHERE lock_key = $1 AND owner = $2`;

// The store's token floor (`LockBackend.tokenFloor`): the counter of the one row no key can have,
// the empty key's (every key is at least one byte). A grant never touches it.

/** The floor; no row: none. */
export const storeFloor = `SELECT token::text AS token FROM {locks} WHERE lock_key = '\\x'::bytea`;
/** Params: floor. Floors only go up. */
export const liftStoreFloor = `INSERT INTO {locks} (lock_key, token) VALUES ('\\x'::bytea, $1::bigint)
  ON CONFLICT (lock_key) DO UPDATE SET token = GREATEST({locks}.token, EXCLUDED.token)`;
/** The largest counter of any key, of locks and of shared keys (the floor's row among them); a scan of both tables. */
export const tokenCeiling = `SELECT GREATEST(COALESCE((SELECT MAX(token) FROM {locks}), 0), COALESCE((SELECT MAX(token) FROM {sharedKeys}), 0))::text AS ceiling`;

// Session mode: the lock is an advisory lock `(namespace, id)` held by one dedicated connection;
// the row supplies the id (unique per key, so no two keys share a lock) and the fencing counter.

/** Params: key. The key's advisory lock id, creating its row on first use. */
export const keyId = `
WITH created AS (INSERT INTO {locks} (lock_key, token) VALUES ($1, 0) ON CONFLICT (lock_key) DO NOTHING RETURNING id)
SELECT id FROM created UNION ALL SELECT id FROM {locks} WHERE lock_key = $1`;

/**
 * Params: namespace, id, idle timeout ('<n>ms'). The server ends the session, and so frees its
 * advisory locks, once it has been idle that long: the session lease's ttl.
 */
export const lockWait = `SELECT true AS got, set_config('idle_session_timeout', $3, false) FROM pg_advisory_lock($1::int, $2::int)`;
export const lockTry = `SELECT pg_try_advisory_lock($1::int, $2::int) AS got, set_config('idle_session_timeout', $3, false)`;
/** `pg_locks` rows of this namespace's advisory locks (two-key form). */
function advisoryOf(namespace: string): string {
  return `locktype = 'advisory' AND classid = ${namespace}::bigint::oid AND objsubid = 2`;
}
/** `pg_locks`' condition for the entry of session `pid` on the two-int advisory lock (namespace, id): held or queued. */
function advisoryEntry(pid: string, namespace: string, id: string): string {
  return `${advisoryOf(namespace)} AND pid = ${pid} AND objid = ${id}::bigint::oid`;
}
/**
 * Params: namespace, pids (int[]). The advisory locks of this namespace that those processes still
 * queue for (`pid`, `id`), read from `pg_locks` once; a blocked wait missing from it holds its lock
 * already, or its wait is gone.
 */
export const waitsQueued = `SELECT pid, objid::bigint AS id FROM pg_locks WHERE ${advisoryOf('$1')} AND NOT granted AND pid = ANY($2::int[])`;
/** Params: pid, namespace, id. Ends the session of `pid` if it still holds or waits for the lock (never another's). */
export const endStranded = `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE ${advisoryEntry('$1', '$2', '$3')}`;

/**
 * Params: least token, owner, key, id, lock-delay lease ms (0: none). For the advisory lock's new
 * holder, in one statement (one round trip of the cycle's three): how long the previous holder's
 * lock-delay marker still runs (`left_ms`, server clock; 0 none), and, only when it runs no more,
 * the counter bumped (`token`). In session mode `expires_at` is that marker: NULL, or how long a
 * holder that asked for lock-delay keeps the key from the next one if its connection dies (renewed
 * with the session, cleared by its release). Both NULL: the key's row no longer has that id (the
 * table was emptied meanwhile).
 */
export const sessionToken = `WITH mark AS (
    SELECT COALESCE(GREATEST(0, EXTRACT(EPOCH FROM (expires_at - clock_timestamp())) * 1000), 0)::float8 AS left_ms
    FROM {locks} WHERE lock_key = $3 AND id = $4
  ), bumped AS (
    UPDATE {locks} SET token = GREATEST(token + 1, $1::bigint), owner = $2,
      expires_at = CASE WHEN $5::float8 > 0 THEN clock_timestamp() + $5::float8 * interval '1 millisecond' END
    WHERE lock_key = $3 AND id = $4 AND (SELECT left_ms FROM mark) = 0 RETURNING token
  )
  SELECT (SELECT token FROM bumped) AS token, (SELECT left_ms FROM mark) AS left_ms`;

/** Params: key, owner, lease ms (0: clear). Renews or clears a holder's lock-delay marker. */
export const sessionDelayMark = `UPDATE {locks} SET expires_at = CASE WHEN $3::float8 > 0 THEN clock_timestamp() + $3::float8 * interval '1 millisecond' END
  WHERE lock_key = $1 AND owner = $2`;

/** Params: namespace, id, idle timeout. Any statement resets the idle clock; this one also proves we hold the lock. */
export const sessionRenew = `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE ${advisoryEntry('pg_backend_pid()', '$1', '$2')} AND granted) AS mine,
  set_config('idle_session_timeout', $3, false)`;

/**
 * The idle limit put back as it was: `set_config` with a NULL value is RESET (the session's
 * starting value). Reading that value from `pg_settings` instead cost about a millisecond of server
 * time: the view builds every setting.
 */
const resetIdleLimit = `set_config('idle_session_timeout', NULL, false)`;

/** Puts the idle limit back, before a connection that took no lock goes back to the pool. */
export const sessionReset = `SELECT ${resetIdleLimit}`;

/** Params: namespace, id. Also puts the idle limit back, so the pooled connection lives on as before. */
export const sessionRelease = `SELECT pg_advisory_unlock($1::int, $2::int) AS released, ${resetIdleLimit}`;

/** Lifts a shared key's counter to `floor` while our claim lives. Params: key, owner, floor. One row = raised. */
export const sharedRaiseFloor = `UPDATE {sharedKeys} SET token = GREATEST(token, $3::bigint)
  WHERE lock_key = $1 AND EXISTS (SELECT 1 FROM {shared} WHERE lock_key = $1 AND owner = $2 AND expires_at > clock_timestamp())`;

// Inspection (reads only). Times left are the server clock's, in ms.
const leftMs = (column: string) => `(EXTRACT(EPOCH FROM (${column} - clock_timestamp())) * 1000)::float8`;
/** Params: key. Lease mode: the live holder (`waiting` false), then the live waiters in arrival order. */
export const inspect = `
SELECT false AS waiting, owner, token, ${leftMs('expires_at')} AS left_ms, 0::bigint AS arrival
  FROM {locks} WHERE lock_key = $1 AND owner IS NOT NULL AND expires_at > clock_timestamp()
UNION ALL
SELECT true, owner, NULL, ${leftMs('expires_at')}, arrival
  FROM {waiters} WHERE lock_key = $1 AND expires_at > clock_timestamp()
ORDER BY waiting, arrival`;
/** Params: key. A shared key's live claims in queue order, with the limit they use. */
export const inspectShared = `SELECT c.owner, c.token, c.exclusive, ${leftMs('c.expires_at')} AS left_ms, k.claim_limit
  FROM {shared} c JOIN {sharedKeys} k ON k.lock_key = c.lock_key
  WHERE c.lock_key = $1 AND c.expires_at > clock_timestamp() ORDER BY c.token`;
/** Params: key, namespace. Session mode: the server processes holding (granted) or waiting for the key's advisory lock (`/testing`'s `claimsOf`). */
export const sessionsOn = `SELECT pid, granted FROM pg_locks JOIN {locks} t ON objid = t.id::oid WHERE t.lock_key = $1 AND ${advisoryOf('$2')}`;
/** Params: key, namespace. Session mode: the row's owner and token while some session holds the key's advisory lock. */
export const inspectSession = `SELECT owner, token FROM {locks} t WHERE lock_key = $1 AND EXISTS (SELECT 1 FROM pg_locks
  WHERE locktype = 'advisory' AND granted AND classid = $2::bigint::oid AND objid = t.id::oid AND objsubid = 2)`;
