// Locks that live on a connection: the store frees one when the connection that took it closes or
// stays idle past the ttl (MySQL's named locks, PostgreSQL's advisory locks). `SessionLocks` is the
// whole life of such a lock, written once: a connection of its own, a try, a wait blocked inside
// the server (cancelled on abort, watched for a connection gone silent, begun again on a new
// connection when cut), the lock-delay marker, the fencing token, renewal, release. A backend
// supplies only its statements, as a `SessionDialect`. Long, with the three helpers only
// it uses (the connection gate, the cancel that repeats, the watch of the blocked waits).
import type { AcquireRequest, Lease } from '../kit/backend.js';
import { BackendError, BackendUnavailableError } from '../api/errors.js';
import { after, noop, race, raceSignal, type Timer } from '../kit/time.js';
import { connectionRefused, sleep, waitOnConnections } from '../kit/wait.js';

/** A lease held by a session: the connection that holds the lock, and the lock's name on the server. */
export interface SessionLease<C, L> extends Lease {
  readonly kind: 'session';
  readonly connection: C;
  readonly lock: L;
  /** The holder asked for lock-delay, so its marker is renewed and cleared with it. */
  readonly lockDelay?: true;
}

/**
 * What a store's session locks are made of. Every method but the blocking wait is bounded by the
 * backend's command timeout, and a connection that times out is closed, never reused (its late
 * answer must not be read as another statement's). Failures are raw: `error` classifies them.
 */
export interface SessionDialect<C, L> {
  /** The backend's name, for errors. */
  readonly name: string;
  /** How many connections the pool may open: session waits beyond most of it (`sessionPlaces`) wait for a place. */
  readonly poolSize: number;
  /** How many of the pool's open connections are idle now (a connection opened for a wait takes a turn when none is). */
  idleConnections(): number;
  /** What must exist before an attempt (tables); run before every one, so a wait rides out a failed first try. */
  ready(): Promise<void>;
  /** A connection from the pool. */
  connect(): Promise<C>;
  /** Back to the pool; with `error`, closed instead (the server frees every lock it held). */
  giveBack(connection: C, error?: unknown): void;
  /** The lock's name for `key`, and whatever the session needs before it locks (its idle limit of `ttlMs`). */
  prepare(connection: C, key: string, ttlMs: number): Promise<L>;
  /** Takes the lock if it is free; never waits. */
  tryLock(connection: C, lock: L, ttlMs: number): Promise<boolean>;
  /** Blocks inside the server until the lock is granted (unbounded: the engine watches it). */
  waitLock(connection: C, lock: L, ttlMs: number): Promise<boolean>;
  /** From another connection: ends the statement `connection` is blocked in. */
  cancelWait(connection: C): Promise<unknown>;
  /**
   * From another connection, in one statement for all of `waits` (each blocked in `waitLock`): for
   * each, is its lock free or already its own, or its session gone? Then its answer should have come.
   */
  waitsStranded(waits: ReadonlyArray<BlockedWait<C, L>>): Promise<boolean[]>;
  /** A blocked wait's connection failed: cut it and end its session on the server, should it linger there (the engine then closes it). */
  abandon(connection: C, lock: L): void;
  /** Frees the lock (the connection then goes back to the pool). Also sent after a wait that may have won it: freeing a lock the session does not hold must do nothing. */
  unlock(connection: C, lock: L): Promise<void>;
  /** Undoes `prepare`, so the connection goes back as it came. */
  reset(connection: C): Promise<void>;
  /**
   * With the lock won: the key's next fencing token (and the lock-delay marker, `markMs` > 0), or
   * `{ waitMs }` while the previous holder's marker runs, or 'again' to start over on a new lock.
   */
  takeToken(connection: C, req: AcquireRequest, lock: L, markMs: number): Promise<bigint | { waitMs: number } | 'again'>;
  /** Resets the session's idle clock to `ttlMs`; whether it still holds the lock. */
  keepAlive(connection: C, lock: L, ttlMs: number): Promise<boolean>;
  /** Sets the lease's lock-delay marker to run `ms` from now (0 clears it). */
  markDelay(lease: SessionLease<C, L>, ms: number): Promise<unknown>;
  /** Raises the key's token floor to `floor` if the lease still holds it. */
  raiseFloor(lease: SessionLease<C, L>, floor: bigint): Promise<boolean>;
  /** Whether `error` is the connection failing rather than the server refusing a statement. */
  unavailable(error: unknown): boolean;
  /** The typed error for `error` (`BackendUnavailableError` or `BackendError`, with the cause). */
  error(operation: string, error: unknown): Error;
}

/** A wait blocked inside the server: its connection and the lock it waits for. */
export interface BlockedWait<C, L> {
  readonly connection: C;
  readonly lock: L;
}

/** How many session connections a backend opens at once (see `#connect`). */
const OPENING_AT_ONCE = 8;

/**
 * How many of the pool's connections session locks leave to the statements they send from another
 * connection: the watch of the blocked waits (every 2 s), the cancel of an aborted one, the table
 * check. With the whole pool held by blocked waits, those statements queued in the pool's own queue
 * behind each other: an aborted wait was never cancelled, a silent one never found out, and with
 * 200 waits their watches (about 100 a second) kept a connection given back from the waiter next in
 * line for it past the connect timeout (a CI run: 113 of 250 waits failed "timeout exceeded when
 * trying to connect"). A tenth of the pool, at least one; a pool of one has none to spare.
 */
function sessionPlaces(poolSize: number): number {
  return poolSize > 1 ? poolSize - Math.max(1, Math.floor(poolSize / 10)) : poolSize;
}

/** The lifecycle of session locks over one dialect; see the top of this file. */
export class SessionLocks<C, L> {
  readonly #d: SessionDialect<C, L>;
  readonly #connectGraceMs: number;
  /** Connections taken for a wait or a held lock, until given back, each with the function that gives its place back. */
  readonly #taken = new Map<C, () => void>();
  /** Leases already released: their connection is back in the pool, maybe holding another lease's lock. */
  readonly #released = new WeakSet<Lease>();
  readonly #places: Gate;
  readonly #opening = new Gate(OPENING_AT_ONCE);
  readonly #watch: BlockedWatch<BlockedWait<C, L>>;
  /** When a connection was last opened (`performance.now()`): the server is up, however slow. */
  #connectedAt = -Infinity;
  readonly #reachedAt = (): number => this.#connectedAt;
  /** Aborted by `close()`: reads riding out a busy server stop there. */
  readonly #closing = new AbortController();

  /**
   * `connectGraceMs`: how long a wait rides out failures to get a connection (two connect
   * timeouts: a connect that fails takes one itself, so a shorter grace would allow no second
   * try). `commandTimeoutMs`: how long a grant on its way to a watched wait is given to arrive.
   */
  constructor(dialect: SessionDialect<C, L>, connectGraceMs: number, commandTimeoutMs: number) {
    this.#d = dialect;
    this.#connectGraceMs = connectGraceMs;
    this.#places = new Gate(sessionPlaces(dialect.poolSize));
    this.#watch = new BlockedWatch(dialect.name, (waits) => dialect.waitsStranded(waits), commandTimeoutMs);
  }

  /**
   * The lock of `req.key` on a connection of its own. A wait whose connection could not be had in
   * time (hundreds of waiters arriving together open hundreds of connections, which took over 2 s
   * on a loaded 2-core machine) tries again while such failures have lasted less than the grace,
   * and for as long as the caller's deadline allows while other connects get through (a server too
   * busy to start every session in time is not down); a wait whose connection is cut waits again
   * on a new one. @throws the signal's reason on abort; the dialect's typed error otherwise.
   */
  acquire(req: AcquireRequest): Promise<SessionLease<C, L> | null> {
    return this.#rideOut(req.wait, req.signal, () => this.#attempt(req));
  }

  /**
   * `read`, statements sent on the pool (the store's token floor, which core reads before a
   * locker's first acquisition), made again while they fail for want of a connection, as a wait is
   * (`acquire`): a server too busy to start every session in time must not fail a wait through its
   * first read where it would not through the wait itself. Bounded like a wait's grace, which other
   * connects getting through renew. @throws the typed error of the last failure.
   */
  ridingOut<T>(read: () => Promise<T>): Promise<T> {
    return this.#rideOut(true, this.#closing.signal, read);
  }

  /**
   * `attempt` made again while it fails for want of a connection (`waitOnConnections`), except when
   * the server refused the connection: a server that is not there is down, not busy, and riding
   * that out is the locker's grace (`LockerOptions.unavailableGraceMs`); this one on top of it made a
   * wait on a closed port last both graces and more.
   */
  async #rideOut<T>(wait: boolean, signal: AbortSignal, attempt: () => Promise<T | 'again'>): Promise<T> {
    try {
      return await waitOnConnections(
        wait,
        signal,
        this.#connectGraceMs,
        () => attempt().catch((error: unknown) => Promise.reject(connectionRefused(error) ? new Refused(error) : error)),
        this.#reachedAt,
      );
    } catch (error) {
      throw error instanceof Refused ? error.error : error;
    }
  }

  async #attempt(req: AcquireRequest): Promise<SessionLease<C, L> | null | 'again'> {
    const d = this.#d;
    await d.ready();
    const connection = await this.#connect(req.signal);
    let lock: L | undefined;
    let held = false;
    // Once a blocking wait was sent, the session may hold the lock whatever the wait's answer: a
    // cancel (the caller's abort) that reaches the statement just after the server granted it ends
    // the statement with an error, and the lock, a session's, stays. So a wait that ends without the
    // lock frees it as if held (freeing a lock not held is harmless), rather than only resetting.
    let waited = false;
    try {
      lock = await d.prepare(connection, req.key, req.ttlMs);
      req.signal.throwIfAborted();
      // A try first, bounded by the command timeout like every statement: a free key is granted at
      // once, and a connection that went silent for good (an idle one from the pool, say) is found
      // out there and replaced, rather than by a blocking wait that would never end on it.
      held = await d.tryLock(connection, lock, req.ttlMs);
      if (!held && req.wait) {
        waited = true;
        const got = await this.#block(connection, lock, req);
        if (got === 'again') return 'again';
        held = got;
        if (!held) throw new BackendError(d.name, 'acquire', { cause: new Error('the blocking lock wait ended without the lock') });
      }
      req.signal.throwIfAborted();
      if (!held) {
        await this.#free(connection, lock, false);
        return null;
      }
      const mark = req.lockDelayMs ? req.ttlMs : 0;
      for (;;) {
        // The server's idle clock restarts with each statement: count the lease from this one.
        const acquiredAt = performance.now();
        const token = await d.takeToken(connection, req, lock, mark);
        if (token === 'again') {
          await this.#free(connection, lock, true);
          return 'again';
        }
        if (typeof token === 'object') {
          // Lock-delay: the server frees a session lock the moment its connection closes (a killed
          // process), so a holder that asked for lock-delay leaves a marker in the key's row. Having
          // won the lock we wait until the marker has run out (whatever our own setting), with a
          // statement every ttl / 3 so that our own idle limit does not end our session.
          await sleep(Math.min(token.waitMs, req.ttlMs / 3), req.signal);
          continue;
        }
        const lease = { kind: 'session' as const, key: req.key, owner: req.owner, token, acquiredAt, connection, lock };
        return mark ? { ...lease, lockDelay: true } : lease;
      }
    } catch (error) {
      await this.#free(connection, lock, held || waited).catch(noop);
      if (req.signal.aborted) throw req.signal.reason;
      throw d.error('acquire', error);
    }
  }

  /**
   * The wait blocked inside the server: cancelled from another connection on abort, watched from
   * another for a connection gone silent. 'again' when its connection failed: the server frees what
   * it held, and a silent one's session (if it still waits on or holds this lock) is ended.
   */
  async #block(connection: C, lock: L, req: AcquireRequest): Promise<boolean | 'again'> {
    const d = this.#d;
    const stopCancelling = cancelOnAbort(req.signal, () => d.cancelWait(connection));
    try {
      return await this.#watch.watch({ connection, lock }, d.waitLock(connection, lock, req.ttlMs));
    } catch (error) {
      if (req.signal.aborted || !d.unavailable(error)) throw error;
      d.abandon(connection, lock);
      this.#giveBack(connection, error);
      return 'again';
    } finally {
      stopCancelling();
    }
  }

  /** Resets the session's idle clock; false once the lease is gone (released, or its connection died with the lock). */
  async renew(lease: SessionLease<C, L>, ttlMs: number): Promise<boolean> {
    const mine = await this.#onLease(lease, 'renew', async () => {
      const ours = await this.#d.keepAlive(lease.connection, lease.lock, ttlMs);
      if (ours && lease.lockDelay) await this.#d.markDelay(lease, ttlMs);
      return ours;
    });
    return mine === true;
  }

  /** Frees the lock and gives the connection back, once: a second call must not free another lease's lock on it. */
  async release(lease: SessionLease<C, L>): Promise<void> {
    if (this.#released.has(lease)) return;
    this.#released.add(lease);
    // A release is not a loss: clear our lock-delay marker first, so the next holder does not wait.
    if (lease.lockDelay) await this.#d.markDelay(lease, 0).catch(noop);
    await this.#free(lease.connection, lease.lock, true);
  }

  /** @returns false once the lease is gone. */
  async raiseTokenFloor(lease: SessionLease<C, L>, floor: bigint): Promise<boolean> {
    return (await this.#onLease(lease, 'raise token floor', () => this.#d.raiseFloor(lease, floor))) === true;
  }

  /** Closes every connection still taken (the server frees their locks); for the backend's `close()`. */
  close(): void {
    this.#closing.abort(new Error('the backend was closed'));
    for (const connection of [...this.#taken.keys()]) this.#giveBack(connection, new Error('the backend was closed'));
  }

  /** Statements on a held lease's connection; undefined when the lease is gone (released, or the connection died with its lock). */
  async #onLease<T>(lease: SessionLease<C, L>, operation: string, statements: () => Promise<T>): Promise<T | undefined> {
    if (this.#released.has(lease) || !this.#taken.has(lease.connection)) return undefined;
    try {
      return await statements();
    } catch (error) {
      if (this.#d.unavailable(error)) return undefined;
      throw this.#d.error(operation, error);
    }
  }

  /**
   * A connection for a session wait or lock, taken from the pool. Two queues, both bounded by the
   * caller's deadline (`signal`) rather than the connect timeout:
   * - a place among the pool's connections, so that waiters beyond the pool's size wait for a
   *   held lock to be given back instead of failing when the pool's own queue times out;
   * - a turn to open a new connection: two hundred opened at once (two hundred waiters arriving
   *   together) took over 2 s each, the connect timeout, on a loaded 2-core machine, while a few at
   *   a time open in milliseconds. An opening that fails for want of the server fails those
   *   waiting for their turn with it, so they fail as soon as they would have without the queue
   *   (each tries again within its grace, `acquire`).
   */
  async #connect(signal: AbortSignal): Promise<C> {
    const d = this.#d;
    const leavePool = await this.#places.enter(signal).catch((error: unknown) => {
      throw signal.aborted ? signal.reason : error;
    });
    let leaveOpening: (() => void) | undefined;
    try {
      if (d.idleConnections() === 0) leaveOpening = await this.#opening.enter(signal);
      const connection = await raceSignal(d.connect(), signal, (late) => d.giveBack(late));
      // A connection opened just now shows the server up (an idle one from the pool shows nothing).
      if (leaveOpening) this.#connectedAt = performance.now();
      this.#taken.set(connection, leavePool);
      return connection;
    } catch (error) {
      leavePool();
      if (signal.aborted) throw signal.reason;
      if (leaveOpening && d.unavailable(error)) this.#opening.failQueued(error);
      throw d.error('acquire', error);
    } finally {
      leaveOpening?.();
    }
  }

  /** Frees the lock (or undoes `prepare`) and gives the connection back; a connection that fails is closed (the server frees its locks). */
  async #free(connection: C, lock: L | undefined, held: boolean): Promise<void> {
    if (!this.#taken.has(connection)) return; // given back already (closed, or cut)
    try {
      if (held && lock !== undefined) await this.#d.unlock(connection, lock);
      else await this.#d.reset(connection);
      this.#giveBack(connection);
    } catch (error) {
      this.#giveBack(connection, error);
      if (!this.#d.unavailable(error)) throw this.#d.error('release', error);
    }
  }

  /** Gives a taken connection back to the pool, once, and its place to the next in line. */
  #giveBack(connection: C, error?: unknown): void {
    const leavePool = this.#taken.get(connection);
    if (!leavePool) return;
    this.#taken.delete(connection);
    leavePool();
    this.#d.giveBack(connection, error);
  }
}

/** At most `limit` holders at a time; the others wait their turn in arrival order. */
class Gate {
  #free: number;
  readonly #queue: Array<{ admit(): void; fail(error: unknown): void }> = [];

  constructor(limit: number) {
    this.#free = limit;
  }

  /**
   * Resolves to the function that gives the place back, once it is this caller's turn.
   * @throws the signal's reason if it aborts first (the caller leaves the queue).
   */
  async enter(signal: AbortSignal): Promise<() => void> {
    signal.throwIfAborted();
    if (this.#free > 0) this.#free--;
    else {
      await new Promise<void>((resolve, reject) => {
        const waiter = {
          admit: () => {
            signal.removeEventListener('abort', abort);
            resolve();
          },
          fail: (error: unknown) => {
            signal.removeEventListener('abort', abort);
            reject(error);
          },
        };
        const abort = () => {
          this.#queue.splice(this.#queue.indexOf(waiter), 1);
          reject(signal.reason);
        };
        this.#queue.push(waiter);
        signal.addEventListener('abort', abort, { once: true });
      });
    }
    let left = false;
    return () => {
      if (left) return;
      left = true;
      const next = this.#queue.shift();
      if (next)
        next.admit(); // the place passes straight to the next in line
      else this.#free++;
    };
  }

  /** Rejects everyone waiting for a place with `error`. */
  failQueued(error: unknown): void {
    for (const waiter of this.#queue.splice(0)) waiter.fail(error);
  }
}

/**
 * For a wait that blocks inside the server (a named or advisory lock): once `signal` aborts, calls
 * `cancel` (which asks the server, from another connection, to end the waiting statement), and
 * again `everyMs` after each attempt settles, until the returned function is called when the
 * statement has ended. Once is not enough: an abort that lands just before the statement reaches
 * the server cancels nothing, and the wait would go on with nobody waiting for it. A failed attempt
 * is only tried again.
 */
export function cancelOnAbort(signal: AbortSignal, cancel: () => Promise<unknown>, everyMs = 100): () => void {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const repeat = () => {
    void cancel()
      .catch(() => undefined)
      .then(() => {
        if (!stopped) timer = setTimeout(repeat, everyMs);
      });
  };
  signal.addEventListener('abort', repeat, { once: true });
  if (signal.aborted) repeat();
  return () => {
    stopped = true;
    signal.removeEventListener('abort', repeat);
    clearTimeout(timer);
  };
}

/**
 * The watch of the waits blocked inside the server on connections of their own (named or advisory
 * locks). A connection that went silent for good (a partition, a middlebox that lost its state)
 * carries nothing more, not even the grant, and nothing closes it: without a watch such a wait
 * would never end, while the server keeps the lock for a client that is not listening. So about
 * every `everyMs` (jittered) one check, sent from another connection, asks about every wait blocked
 * at that moment: is its lock already its own, or its wait gone from the server? A wait the server
 * has shown so for `graceMs` in a row (a grant on its way is given that long to arrive) fails with
 * `BackendUnavailableError`; its caller then closes the connection and has the server end its
 * session, which frees the lock. A check that fails counts as a no for every wait (an unreachable
 * store is not this). One check for all, not one per wait: two hundred waits checked each on its
 * own sent a hundred statements a second, each reading the server's whole lock table.
 */
export class BlockedWatch<W> {
  readonly #backend: string;
  readonly #check: (waits: W[]) => Promise<boolean[]>;
  readonly #graceMs: number;
  readonly #everyMs: number;
  /** The waits blocked now, each with since when the server has shown it stranded, and how to fail it. */
  readonly #watched = new Map<W, { since: number | undefined; fail: (error: unknown) => void }>();
  #timer: Timer | undefined;
  #checking = false;

  constructor(backend: string, check: (waits: W[]) => Promise<boolean[]>, graceMs: number, everyMs = 2000) {
    this.#backend = backend;
    this.#check = check;
    this.#graceMs = graceMs;
    this.#everyMs = everyMs;
  }

  /** Settles as `blocked` (the wait's statement) does, or rejects as above. */
  watch<T>(wait: W, blocked: Promise<T>): Promise<T> {
    return race(blocked, (fail) => {
      this.#watched.set(wait, { since: undefined, fail });
      this.#schedule();
      return () => {
        this.#watched.delete(wait);
        if (this.#watched.size === 0) {
          this.#timer?.cancel();
          this.#timer = undefined;
        }
      };
    });
  }

  #schedule(): void {
    if (this.#timer || this.#checking || this.#watched.size === 0) return;
    this.#timer = after(this.#everyMs * (0.75 + Math.random() / 2), () => {
      this.#timer = undefined;
      this.#run();
    });
  }

  #run(): void {
    const waits = [...this.#watched.keys()];
    const sentAt = performance.now();
    this.#checking = true;
    void this.#check(waits)
      .catch(() => waits.map(() => false))
      .then((stranded) => {
        this.#checking = false;
        for (const [i, wait] of waits.entries()) {
          const entry = this.#watched.get(wait);
          if (!entry) continue; // settled meanwhile
          if (!stranded[i]) entry.since = undefined;
          else if (performance.now() - (entry.since ??= sentAt) >= this.#graceMs) {
            this.#watched.delete(wait);
            entry.fail(
              new BackendUnavailableError(this.#backend, 'acquire', {
                cause: new Error(`a blocked wait got no answer although the server showed it granted or gone for ${this.#graceMs} ms`),
              }),
            );
          }
        }
        this.#schedule();
      });
  }
}

/** A failure `SessionLocks` does not ride out, carried past `waitOnConnections` (which forgives only `BackendUnavailableError`). */
class Refused {
  constructor(readonly error: unknown) {}
}
