/**
 * The SQL, kept to what MySQL 8 and MariaDB 10.11+ both accept. Every expiry is computed by the
 * server's clock in UTC (`UTC_TIMESTAMP(6)`), never the client's. Not `NOW(6)`: that is local to
 * each session's `time_zone`, so a client whose connections set another zone (or a daylight-saving
 * change) would read other clients' leases as expired hours early and take held keys.
 * `??` stands for the escaped table name.
 *
 * One row per key, never deleted: `token` is the key's fencing counter and must survive releases
 * and restarts. A row is free when `owner` is NULL or `expires_at` has passed.
 */
export const createTable = `CREATE TABLE IF NOT EXISTS ?? (
  key_hash BINARY(32) NOT NULL PRIMARY KEY COMMENT 'SHA-256 of the UTF-8 key',
  lock_key VARBINARY(1024) NOT NULL COMMENT 'the key itself, compared byte for byte',
  owner CHAR(36) CHARACTER SET ascii NULL COMMENT 'holder (crypto.randomUUID), NULL when free',
  expires_at DATETIME(6) NULL COMMENT 'server time (UTC) the lease ends',
  token BIGINT UNSIGNED NOT NULL COMMENT 'fencing counter: only grows'
) ENGINE=InnoDB`;

/**
 * One attempt, one statement: insert the key's row (its first use) or take it over if free or
 * expired. `LAST_INSERT_ID(expr)` hands the new token back with the reply: one more than the last,
 * or the caller's least token if that is higher (a migration's hint; 0 for none). A held row (or
 * another key with the same hash) is left as it is and reports insert id 0 (`LAST_INSERT_ID(0)`):
 * tokens start at 1, and the affected-rows count cannot tell "held" from "inserted" when the
 * connection counts matched rows (mysql2's default). The assignments run in order, each seeing the
 * ones before: token and owner test the old row; expires_at follows owner, which is ours only if
 * we just took it or an earlier attempt of the same wait did (same owner) and its answer never
 * came: then the row's token is handed back as this attempt's grant (it went out in no answer, so
 * nobody used it), with the lease counting from this attempt.
 * `VALUES(col)` is the form both servers accept (MySQL 8 deprecates it for a row alias, which
 * MariaDB does not have). Params: hash, key, owner, ttl µs, least token, least token.
 */
export const acquire = `INSERT INTO ?? (key_hash, lock_key, owner, expires_at, token)
  VALUES (?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, LAST_INSERT_ID(GREATEST(1, ?)))
  ON DUPLICATE KEY UPDATE
  token = IF(lock_key = VALUES(lock_key) AND (owner IS NULL OR expires_at <= UTC_TIMESTAMP(6)), LAST_INSERT_ID(GREATEST(token + 1, ?)),
    IF(lock_key = VALUES(lock_key) AND owner = VALUES(owner), LAST_INSERT_ID(token), token + LAST_INSERT_ID(0))),
  owner = IF(lock_key = VALUES(lock_key) AND (owner IS NULL OR expires_at <= UTC_TIMESTAMP(6)), VALUES(owner), owner),
  expires_at = IF(owner = VALUES(owner), VALUES(expires_at), expires_at)`;

/** Params: ttl µs, hash, owner. One row changed = still ours. */
export const renew = `UPDATE ?? SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE key_hash = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)`;

/** Params: hash, owner. Owner-checked and idempotent. */
export const release = `UPDATE ?? SET owner = NULL, expires_at = NULL WHERE key_hash = ? AND owner = ?`;

/**
 * Params: floor, hash, owner. Lifts the counter to `floor` unless the key was granted to someone
 * else since (which would have replaced our owner). One row changed = raised.
 */
export const raiseFloor = `UPDATE ?? SET token = GREATEST(token, ?) WHERE key_hash = ? AND owner = ?`;

// The store's token floor (`LockBackend.tokenFloor`): the counter of the one row no key can have,
// the empty key's (every key is at least one byte). A grant never touches it.

/** Params: hash of ''. The floor; no row: none. */
export const storeFloor = `SELECT token FROM ?? WHERE key_hash = ? AND lock_key = ''`;
/** Params: hash of '', floor. Floors only go up. */
export const liftStoreFloor = `INSERT INTO ?? (key_hash, lock_key, owner, expires_at, token) VALUES (?, '', NULL, NULL, ?)
  ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))`;
/** The largest counter of any key, of locks and of shared keys (the floor's row among them); a scan of both tables. */
export const tokenCeiling = `SELECT CAST(GREATEST(COALESCE((SELECT MAX(token) FROM ??), 0), COALESCE((SELECT MAX(token) FROM {keys}), 0)) AS CHAR) AS ceiling`;

// Session mode: the lock is a named lock (`GET_LOCK`) held by one dedicated connection; the row
// only supplies the fencing counter.

/** Params: seconds. The server closes the held connection (so frees the lock) after this long idle. */
export const sessionIdleLimit = `SET SESSION wait_timeout = ?`;
export const sessionIdleReset = `SET SESSION wait_timeout = @@GLOBAL.wait_timeout`;
/** Params: name, seconds (0 = one attempt). 1 = granted, 0 = timed out, NULL = error or killed. */
export const getLock = `SELECT GET_LOCK(?, ?) AS got`;
/** Params: name. The connection id holding it, or NULL. */
export const holderThread = `SELECT IS_USED_LOCK(?) AS thread`;
/** The connection's database: part of every named lock's name (named locks are server-wide). */
export const database = `SELECT DATABASE() AS db`;
/**
 * Params: a JSON array of [connection id, name] pairs. For each, in order (`i` from 1): who holds
 * the name (or NULL), and whether that connection is still there; the process list read once.
 */
export const waitStates = `SELECT w.i, w.id, IS_USED_LOCK(w.name) AS holder, p.ID IS NOT NULL AS alive
  FROM JSON_TABLE(?, '$[*]' COLUMNS (i FOR ORDINALITY, id BIGINT UNSIGNED PATH '$[0]', name VARCHAR(64) PATH '$[1]')) AS w
  LEFT JOIN information_schema.PROCESSLIST p ON p.ID = w.id
  ORDER BY w.i`;
/** Params: name. 1 while this connection holds it. */
export const holdsLock = `SELECT IS_USED_LOCK(?) = CONNECTION_ID() AS mine`;
/**
 * Params: name. Gives the named lock back and the connection its usual idle limit in one statement
 * (the pool's next user expects it); the answer of `RELEASE_LOCK` is not needed.
 */
export const releaseLock = `SET @deadbolt_released = RELEASE_LOCK(?), SESSION wait_timeout = @@GLOBAL.wait_timeout`;
/**
 * Params: least token, owner, lock-delay lease µs (0: none), same again, hash, key. Bumps the counter
 * for a named-lock holder. In session mode `expires_at` is the lock-delay marker: NULL, or how long a
 * holder that asked for lock-delay keeps the key from the next one if its connection dies (renewed
 * with the session, cleared by its release). It changes nothing while a previous holder's marker
 * still runs (0 rows: that, or the key's first use; `sessionDelayLeft` tells them apart), so the
 * common handoff is this one statement.
 */
export const sessionToken = `UPDATE ?? SET token = LAST_INSERT_ID(GREATEST(token + 1, ?)), owner = ?,
  expires_at = IF(? > 0, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, NULL)
  WHERE key_hash = ? AND lock_key = ? AND (expires_at IS NULL OR expires_at <= UTC_TIMESTAMP(6))`;
/** Params: hash, key, owner, lock-delay lease µs (0: none), same again, least token. */
export const sessionTokenFirst = `INSERT INTO ?? (key_hash, lock_key, owner, expires_at, token)
  VALUES (?, ?, ?, IF(? > 0, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, NULL), LAST_INSERT_ID(GREATEST(1, ?)))`;
/** Params: hash. How long (µs, server clock) the previous holder's lock-delay marker still runs: 0 if none, no row on the key's first use. */
export const sessionDelayLeft = `SELECT GREATEST(0, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)) AS left_us FROM ?? WHERE key_hash = ?`;
/** Params: lease µs, hash, owner. Renews (µs > 0) or clears (NULL via 0) a holder's lock-delay marker. */
export const sessionDelayMark = `UPDATE ?? SET expires_at = IF(? > 0, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, NULL) WHERE key_hash = ? AND owner = ?`;

// Shared claims (semaphores, read-write locks; the rule is core's `Claim`), lease mode.
// `{keys}` has one row per shared key, never deleted: its token counter, and the limit its live
// claims use. `{claims}` has one row per claim, granted or waiting, ordered by its token (taken at
// arrival). An attempt is one READ COMMITTED transaction that first locks the key's row, so a key's
// attempts run one at a time and each sees every claim committed before it (no gap locks: claims of
// different keys never block each other).

export const createSharedKeys = `CREATE TABLE IF NOT EXISTS {keys} (
  key_hash BINARY(32) NOT NULL PRIMARY KEY COMMENT 'SHA-256 of the UTF-8 key',
  token BIGINT UNSIGNED NOT NULL COMMENT 'fencing counter: only grows',
  claim_limit INT UNSIGNED NOT NULL COMMENT 'the limit of the live claims (0: a read-write lock)'
) ENGINE=InnoDB`;

export const createSharedClaims = `CREATE TABLE IF NOT EXISTS {claims} (
  key_hash BINARY(32) NOT NULL,
  owner CHAR(36) CHARACTER SET ascii NOT NULL,
  token BIGINT UNSIGNED NOT NULL,
  exclusive BOOLEAN NOT NULL,
  expires_at DATETIME(6) NOT NULL COMMENT 'server time (UTC) the claim ends, waiting or granted',
  PRIMARY KEY (key_hash, owner),
  KEY by_token (key_hash, token)
) ENGINE=InnoDB`;

/** Params: hash, limit. Outside the transaction, so it holds no lock past itself. */
export const sharedKeyRow = `INSERT IGNORE INTO {keys} (key_hash, token, claim_limit) VALUES (?, 0, ?)`;
/** Params: hash. */
export const sharedLockKey = `SELECT claim_limit FROM {keys} WHERE key_hash = ? FOR UPDATE`;
/** Params: hash. */
export const sharedPurge = `DELETE FROM {claims} WHERE key_hash = ? AND expires_at <= UTC_TIMESTAMP(6)`;
/** Params: hash. The queue, in arrival order, with the claims that ran out marked. */
export const sharedQueue = `SELECT owner, token, exclusive, expires_at <= UTC_TIMESTAMP(6) AS expired FROM {claims} WHERE key_hash = ? ORDER BY token`;
/** Params: least token, limit, hash. The new claim's token comes back as the insert id. */
export const sharedNextToken = `UPDATE {keys} SET token = LAST_INSERT_ID(GREATEST(token + 1, ?)), claim_limit = ? WHERE key_hash = ?`;
/** Params: hash, owner, token, exclusive, ttl µs. */
export const sharedInsert = `INSERT INTO {claims} (key_hash, owner, token, exclusive, expires_at) VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)`;
/** Params: hash, token. A waiter's look between attempts, without the key's lock: the live claims ahead of it, and how many of those are exclusive. */
export const sharedAhead = `SELECT COUNT(*) AS ahead, COALESCE(SUM(exclusive), 0) AS exclusive_ahead FROM {claims}
  WHERE key_hash = ? AND token < CAST(? AS UNSIGNED) AND expires_at > UTC_TIMESTAMP(6)`;
/** Params: ttl µs, hash, owner. Used by an attempt (under the key's lock) and by renew (one row = still ours). */
export const sharedRenew = `UPDATE {claims} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE key_hash = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)`;
/** Params: hash, owner. */
export const sharedRelease = `DELETE FROM {claims} WHERE key_hash = ? AND owner = ?`;
/** Params: floor, hash, hash, owner. Lifts a shared key's counter while our claim lives; one row changed (or already higher: matched) = raised. */
export const sharedRaiseFloor = `UPDATE {keys} SET token = GREATEST(token, ?) WHERE key_hash = ?
  AND EXISTS (SELECT 1 FROM {claims} WHERE key_hash = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6))`;

// Inspection (reads only). Times left are the server clock's, in ms.
/** Params: hash, key. Lease mode: the live holder. */
export const inspect = `SELECT owner, token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1000 AS left_ms FROM ??
  WHERE key_hash = ? AND lock_key = ? AND owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)`;
/** Params: hash. A shared key's live claims in queue order, with the limit they use. */
export const inspectShared = `SELECT c.owner, c.token, c.exclusive, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), c.expires_at) / 1000 AS left_ms, k.claim_limit
  FROM {claims} c JOIN {keys} k ON k.key_hash = c.key_hash WHERE c.key_hash = ? AND c.expires_at > UTC_TIMESTAMP(6) ORDER BY c.token`;
/** Params: lock name, hash, key. Session mode: the row's owner and token while a connection holds the key's named lock. */
export const inspectSession = `SELECT owner, token FROM ?? WHERE IS_USED_LOCK(?) IS NOT NULL AND key_hash = ? AND lock_key = ?`;
