import { setMaxListeners } from 'node:events';
import type { Socket } from 'node:net';
import {
  BackendError,
  BackendUnavailableError,
  InvalidArgumentError,
  LimitMismatchError,
  type Capabilities,
  type LockBackend,
} from '@deadbolt/core';
import {
  backendFailure,
  count,
  grantable,
  MAX_TIMER_MS,
  ms,
  noAnswer,
  readOptions,
  required,
  sleep,
  text,
  url,
  withTimeout,
  type Rules,
  type AcquireRequest,
  type Lease,
  type SharedRequest,
} from '@deadbolt/core/backend';
import {
  Code,
  CreateMode,
  NODE_DELETED,
  codeOf,
  createClient,
  isUnavailable,
  zk,
  zxidOf,
  type Stat,
  type ZooKeeperClient,
} from './zookeeper-client.js';

export interface ZooKeeperBackendOptions {
  /**
   * `zookeeper://[user:password@]host:port[,host:port...][/chroot]`. The backend opens and closes
   * its own sessions; a user and password are added to each session as `digest` authentication.
   */
  url: string;
  /** Parent of every lock node. Default `/deadbolt`. */
  root?: string;
  /** How long to wait for a session to connect before `BackendUnavailableError`. Default 3000 ms. */
  connectTimeoutMs?: number;
  /**
   * The server's `maxSessionTimeout`: the longest ttl this backend accepts (checked before any
   * I/O). Default 40 000 ms, ZooKeeper's default (20 × a tickTime of 2 s).
   */
  maxSessionTimeoutMs?: number;
}

/** One ZooKeeper session; its timeout is the ttl of every lease taken through it. */
export interface ZooKeeperSession {
  readonly client: ZooKeeperClient;
  readonly ttlMs: number;
  /** Aborts when the session can no longer be counted on: connection lost, expired or closed. */
  readonly lost: AbortSignal;
}

interface Session extends ZooKeeperSession {
  readonly ready: Promise<void>;
  readonly end: (reason: Error) => void;
  /** Acquisitions and leases using the session; at 0 it closes after SESSION_IDLE_MS. */
  users: number;
  idle: NodeJS.Timeout | undefined;
}

export interface ZooKeeperLease extends Lease {
  readonly path: string;
  /** A semaphore permit or read-write lock (its node lives under `sharedPathFor`). */
  readonly shared?: true;
  /** Our node's creation zxid; the token is this plus the key's offset at the grant. */
  readonly zxid: bigint;
  readonly offset: bigint;
  readonly session: Session;
  readonly lost: AbortSignal;
  /** Stops listening and gives the lease's use of its session back (once). */
  readonly stopWatching: () => void;
}

const NODE_PREFIX = 'lock-';

/**
 * A znode path as ZooKeeper accepts it: absolute, no empty, `.` or `..` element, none of the
 * characters it refuses (controls, surrogates, U+FFF0 and up), not under its own `/zookeeper`.
 */
const pathRule = text(
  /^(?!\/zookeeper(?:\/|$))(?:\/(?!\.{1,2}(?:\/|$))[^/\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]+)+$/,
  'an absolute znode path such as /deadbolt (no ., .., control characters or /zookeeper)',
  ['deadbolt', '/', '/a/', '/a//b', '/.', '/a/..', '/a\u0001', '/zookeeper', '/zookeeper/x'],
);

/** How each option of `zookeeperBackend` is checked (see core's options.ts); the conformance suite feeds it hostile values. */
export const zookeeperOptionRules = {
  url: url(['zookeeper']),
  root: pathRule,
  connectTimeoutMs: ms(),
  maxSessionTimeoutMs: count(1000, MAX_TIMER_MS),
} satisfies Rules<ZooKeeperBackendOptions>;

/** What one kind of claim (a mutex waiter, a shared claim) looks like in a key's queue. */
interface QueueShape {
  readonly parent: string;
  /** Our node's name before the owner id; `lock-` for a mutex, `lock-<S|X><limit>-` for a shared claim. */
  readonly prefix: string;
  /** May the claim at `index` of `queue` (in sequence order) be granted? */
  readonly granted: (queue: readonly string[], index: number) => boolean;
  /** A shared claim (joins by `#joinShared`, waits for any change to the queue): its key and limit. */
  readonly shared?: { readonly key: string; readonly limit: number };
}

/** A shared claim's mode and limit, from its node's name `lock-<S|X><limit>-<owner>-<sequence>`. */
function claimOf(name: string): { mode: SharedRequest['mode']; limit: number } {
  return { mode: name[NODE_PREFIX.length] === 'X' ? 'exclusive' : 'shared', limit: parseInt(name.slice(NODE_PREFIX.length + 1), 10) };
}
/**
 * A key's token offset is the name of a persistent child `floor-<offset>` (absent = 0), set only by
 * a holder (`raiseTokenFloor`). Being a child, it comes with the same listing that finds the holder,
 * so it is read in one step with the grant at no extra request.
 */
const FLOOR_PREFIX = 'floor-';
/**
 * A sequential node's sequence: the signed 32-bit number ZooKeeper appends to its name (the
 * parent's child version, `%010d`: `-000000005` once it has wrapped past 2^31 − 1).
 */
export function sequenceOf(name: string): number {
  const m = /-(-?\d+)$/.exec(name);
  return m ? Number(m[1]) : NaN;
}

/**
 * Queue order of two sequential nodes of one parent, as ZooKeeper counts: the sequence wraps from
 * 2^31 − 1 to −2^31 (a key busy for ~10^9 cycles gets there), so it is compared as a serial number
 * (RFC 1982): `a` is before `b` when `b` is less than 2^31 steps ahead of it. The live nodes of one
 * parent are never that far apart, so the order survives the wrap. A plain numeric or text sort
 * would put a newcomer after the wrap first in the queue, beside the holder.
 */
export function bySequence(a: string, b: string): number {
  return (sequenceOf(a) - sequenceOf(b)) | 0;
}
const EMPTY = Buffer.alloc(0);
const REAP_DELAY_MS = 1000;
/**
 * An idle session (no lock held or awaited through it) closes after this long, so a process that
 * used many ttls does not keep a session, and its server-side state and heartbeats, for each.
 */
const SESSION_IDLE_MS = 2000;

/**
 * node-zookeeper-client pings a quiet connection every third of the session timeout but never
 * checks that the pings are answered: a connection that went silent for good (a partition, a
 * middlebox that lost its state: no reset, no close) would stay "connected" for ever, and a waiter
 * on it would never hear its turn. Like ZooKeeper's own clients, this cuts the connection once
 * nothing has been read on it for `silentMs` while connected (two thirds of the session timeout);
 * the client then reports it lost and connects again. Returns how to stop watching.
 */
function cutWhenSilent(client: ZooKeeperClient, silentMs: number, connected: () => boolean): () => void {
  const manager = client.connectionManager;
  let socket: Socket | undefined;
  let bytes = 0;
  let since = performance.now();
  const timer = setInterval(() => {
    const now = manager?.socket;
    if (!now || !connected() || now !== socket || now.bytesRead !== bytes) {
      socket = now;
      bytes = now?.bytesRead ?? 0;
      since = performance.now();
    } else if (performance.now() - since >= silentMs) {
      now.destroy();
    }
  }, silentMs / 4);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * ZooKeeper backend: Curator's InterProcessMutex recipe. Each acquirer creates an
 * EPHEMERAL_SEQUENTIAL node `lock-<owner>-<seq>` under the key's node; the lowest sequence holds
 * the lock and every other waiter watches only its predecessor (FIFO, no herd). The lease is the
 * ZooKeeper session (timeout = ttl, one session per distinct ttl); the fencing token is the holder
 * node's creation zxid plus the key's offset (0 unless a migration raised the key's token floor).
 *
 * Connection policy (Curator's "standard" policy): the moment a session loses its connection,
 * ownership is uncertain, so every lock held through it is reported lost (`lock.signal` aborts)
 * and the session is closed rather than resumed; the next acquisition opens a new session.
 * Session expiry always aborts. A waiter whose session is lost that way queues again on a new
 * session (at the back: its old place went with the old session) while its deadline allows; it
 * fails only when no new session can be had.
 */
export class ZooKeeperBackend implements LockBackend<ZooKeeperLease> {
  readonly name = 'zookeeper';
  readonly capabilities: Capabilities = {
    fencing: 'strict',
    fairness: 'fifo',
    lease: 'session',
    wake: 'push',
    // The server bounds session timeouts to [minSessionTimeout, maxSessionTimeout] (2 and 20 ticks
    // by default); a ttl outside its bounds is refused when the session connects.
    minTtlMs: 1000,
    ttlGranularityMs: 1,
    crossProcess: true,
    semaphore: true,
    readWrite: true,
  };
  readonly #hosts: string;
  /** `user:password` from the url, added to every session as digest authentication. */
  readonly #auth: Buffer | undefined;
  readonly #root: string;
  readonly #connectTimeoutMs: number;
  readonly #sessions = new Map<number, Session>();
  /** Key nodes to remove once no lock of ours has used them for REAP_DELAY_MS. */
  readonly #reaps = new Map<string, { timer: NodeJS.Timeout; run: () => Promise<void> }>();
  #closed = false;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: ZooKeeperBackendOptions) {
    const options = readOptions(raw, zookeeperOptionRules, 'zookeeperBackend');
    const url = required(options.url, 'url');
    const chroot = url.path.replace(/\/$/, '');
    if (chroot) pathRule.check(`/${chroot}`, "the url's chroot");
    this.#hosts = url.hosts.map(({ host, port }) => `${host}:${port ?? 2181}`).join(',') + (chroot ? `/${chroot}` : '');
    this.#auth = url.username === undefined ? undefined : Buffer.from(`${url.username}:${url.password ?? ''}`);
    this.#root = options.root ?? '/deadbolt';
    this.#connectTimeoutMs = options.connectTimeoutMs ?? 3000;
    this.capabilities = { ...this.capabilities, maxTtlMs: options.maxSessionTimeoutMs ?? 40_000 };
  }

  /** The node of `key`: base64url of its UTF-8 bytes, so every key is a legal name and no two collide. */
  pathFor(key: string): string {
    return `${this.#root}/${Buffer.from(key, 'utf8').toString('base64url')}`;
  }

  /**
   * The node of a shared key (semaphore, read-write lock): under `#shared`, which no base64url
   * mutex node name can be. Its children are `lock-<S|X><limit>-<owner>-<sequence>`, one per claim.
   */
  sharedPathFor(key: string): string {
    return `${this.#root}/#shared/${Buffer.from(key, 'utf8').toString('base64url')}`;
  }

  /** Sessions currently open (for fault-injection tests: force one to expire). */
  sessions(): ZooKeeperSession[] {
    return [...this.#sessions.values()].filter((s) => !s.lost.aborted);
  }

  /**
   * The session whose timeout is `ttlMs`, connected; every lock with that ttl shares it.
   * @throws BackendUnavailableError when no session connects in time; BackendError when the server
   * will not grant that timeout.
   */
  async session(ttlMs: number): Promise<ZooKeeperSession> {
    if (this.#closed) throw new BackendUnavailableError(this.name, 'connect', { cause: new Error('the backend is closed') });
    let session = this.#sessions.get(ttlMs);
    if (!session || session.lost.aborted) {
      session = this.#connect(ttlMs);
      this.#sessions.set(ttlMs, session);
    }
    await session.ready;
    return session;
  }

  acquire(req: AcquireRequest): Promise<ZooKeeperLease | null> {
    return this.#acquire(req, { parent: this.pathFor(req.key), prefix: NODE_PREFIX, granted: (queue, index) => index === 0 });
  }

  /**
   * A shared claim: the mutex recipe with `SharedRequest`'s rule. Every claim's name carries its
   * mode and limit, so a newcomer with another limit sees it and withdraws. A blocked claim may be
   * let in by the departure of any claim ahead of it, so it watches the key's children (one watch,
   * set by the same read it judged by) rather than one predecessor.
   */
  acquireShared(req: SharedRequest): Promise<ZooKeeperLease | null> {
    const kind = `${NODE_PREFIX}${req.mode === 'exclusive' ? 'X' : 'S'}${req.limit}-`;
    return this.#acquire(req, {
      parent: this.sharedPathFor(req.key),
      prefix: kind,
      // Every live claim has our limit (see `#joinShared`).
      granted: (queue, index) => grantable(queue.map(claimOf), index, req.limit),
      shared: { key: req.key, limit: req.limit },
    });
  }

  async #acquire(req: AcquireRequest, shape: QueueShape): Promise<ZooKeeperLease | null> {
    for (;;) {
      const session = (await this.session(req.ttlMs)) as Session;
      try {
        return await this.#acquireOn(session, req, shape);
      } catch (error) {
        // The session was lost under a waiter (a reset, a failover): queue again on a new one.
        if (!req.wait || req.signal.aborted || !session.lost.aborted || !(error instanceof BackendUnavailableError)) throw error;
        await sleep(20, req.signal);
      }
    }
  }

  async #acquireOn(session: Session, req: AcquireRequest, shape: QueueShape): Promise<ZooKeeperLease | null> {
    this.#use(session);
    let granted = false;
    try {
      const lease = await this.#queueOn(session, req, shape);
      granted = lease !== null;
      return lease;
    } finally {
      if (!granted) this.#unuse(session);
    }
  }

  async #queueOn(session: Session, req: AcquireRequest, shape: QueueShape): Promise<ZooKeeperLease | null> {
    const { parent } = shape;
    this.#cancelReap(parent);
    let path: string | undefined;
    try {
      path = shape.shared
        ? await this.#joinShared(session, parent, shape.prefix + req.owner, shape.shared)
        : await this.#createNode(session, parent, shape.prefix + req.owner);
      // Pipelined on the session (ZooKeeper answers in order): our node's stat, with a watch that
      // reports its deletion by anyone (an operator, a test) as a loss once we hold it, and the queue.
      let acquiredAt = performance.now();
      const deleted = new AbortController();
      const ownPath = path;
      const [stat, listing] = await Promise.all([
        this.#call<Stat | null>(session, 'acquire', (cb) =>
          session.client.exists(
            ownPath,
            (event) => event.getType() === NODE_DELETED && deleted.abort(new Error(`lock node ${ownPath} was deleted`)),
            cb,
          ),
        ),
        this.#children(session, parent),
      ]);
      if (!stat) throw new BackendUnavailableError(this.name, 'acquire', { cause: new Error(`our node ${path} is gone (session lost)`) });
      const mine = path.slice(parent.length + 1);
      let { queue, offset } = listing;
      for (;;) {
        const index = queue.indexOf(mine);
        if (index < 0)
          throw new BackendUnavailableError(this.name, 'acquire', { cause: new Error(`our node ${path} was deleted while waiting`) });
        if (shape.granted(queue, index)) break;
        if (!req.wait) {
          await this.#remove(session, path);
          this.#reap(session, parent);
          return null;
        }
        if (shape.shared) await this.#childrenChanged(session, parent, queue, req.signal);
        else await this.#gone(session, `${parent}/${queue[index - 1]}`, req.signal);
        acquiredAt = performance.now();
        ({ queue, offset } = await this.#children(session, parent));
      }
      return this.#lease(req, session, path, zxidOf(stat), offset, acquiredAt, deleted.signal, shape.shared !== undefined);
    } catch (error) {
      // A cancelled, timed-out or failed waiter takes its node away before reporting; when the
      // session is gone, the server deletes the node with it.
      if (!session.lost.aborted) {
        const cleanup = path ? this.#remove(session, path) : this.#removeOwn(session, parent, shape.prefix + req.owner);
        await cleanup.catch(() => undefined);
      }
      throw error;
    }
  }

  async renew(lease: ZooKeeperLease, ttlMs: number): Promise<boolean> {
    const l = lease;
    if (ttlMs !== l.session.ttlMs) {
      throw new InvalidArgumentError(
        `a ZooKeeper lease is its session, whose timeout is fixed at ${l.session.ttlMs} ms; extend() cannot make it ${ttlMs} ms`,
      );
    }
    if (l.lost.aborted) return false;
    const stat = await this.#call<Stat | null>(l.session, 'renew', (cb) => l.session.client.exists(l.path, undefined, cb));
    return !!stat && zxidOf(stat) === l.zxid && !l.lost.aborted;
  }

  /**
   * See `LockBackend.raiseTokenFloor`. Later holders' nodes are newer than ours (higher zxid), so an
   * offset of `floor - our zxid` puts every later token above `floor`; set in one multi-op with a
   * check that our node (so our hold: nobody is granted before it goes) still exists.
   */
  async raiseTokenFloor(lease: ZooKeeperLease, floor: bigint): Promise<boolean> {
    const l = lease;
    const parent = l.path.slice(0, l.path.lastIndexOf('/'));
    if (l.shared) return this.#raiseSharedFloor(l, parent, floor);
    const result = await this.#call<unknown[]>(
      l.session,
      'raise token floor',
      (cb) => {
        const multi = l.session.client
          .transaction()
          .check(l.path)
          .create(`${parent}/${FLOOR_PREFIX}${floor - l.zxid}`, EMPTY, CreateMode.PERSISTENT);
        if (l.offset > 0n) multi.remove(`${parent}/${FLOOR_PREFIX}${l.offset}`);
        multi.commit(cb);
      },
      [Code.NO_NODE],
    );
    return result !== undefined && !l.lost.aborted;
  }

  /**
   * A shared key's floor: other holders may raise it at the same time, so floor nodes are only
   * added (the largest counts) while our claim is checked, and smaller ones removed afterwards by
   * whoever sees them.
   */
  async #raiseSharedFloor(l: ZooKeeperLease, parent: string, floor: bigint): Promise<boolean> {
    const result = await this.#call<unknown[]>(
      l.session,
      'raise token floor',
      (cb) =>
        l.session.client
          .transaction()
          .check(l.path)
          .create(`${parent}/${FLOOR_PREFIX}${floor - l.zxid}`, EMPTY, CreateMode.PERSISTENT)
          .commit(cb),
      [Code.NO_NODE, Code.NODE_EXISTS],
    );
    if (result === undefined) {
      // Either our node is gone, or that very floor exists already (which covers us).
      const stat = await this.#call<Stat | null>(l.session, 'raise token floor', (cb) => l.session.client.exists(l.path, undefined, cb));
      if (!stat || zxidOf(stat) !== l.zxid) return false;
      await this.#call(
        l.session,
        'raise token floor',
        (cb) => l.session.client.create(`${parent}/${FLOOR_PREFIX}${floor - l.zxid}`, EMPTY, CreateMode.PERSISTENT, cb),
        [Code.NODE_EXISTS],
      );
    }
    const floors = (
      (await this.#call<string[]>(l.session, 'raise token floor', (cb) => l.session.client.getChildren(parent, undefined, cb), [
        Code.NO_NODE,
      ])) ?? []
    )
      .filter((name) => name.startsWith(FLOOR_PREFIX))
      .map((name) => BigInt(name.slice(FLOOR_PREFIX.length)));
    const largest = floors.reduce((a, b) => (a > b ? a : b), 0n);
    for (const value of floors)
      if (value < largest) await this.#remove(l.session, `${parent}/${FLOOR_PREFIX}${value}`).catch(() => undefined);
    return !l.lost.aborted;
  }

  async release(lease: ZooKeeperLease): Promise<void> {
    const l = lease;
    l.stopWatching();
    // A lost session took its ephemeral node along, and a closed one can delete nothing.
    if (l.session.lost.aborted) return;
    await this.#remove(l.session, l.path);
    this.#reap(l.session, l.path.slice(0, l.path.lastIndexOf('/')));
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const pending = [...this.#reaps.values()];
    this.#reaps.clear();
    for (const reap of pending) clearTimeout(reap.timer);
    await Promise.allSettled(pending.map((reap) => reap.run()));
    for (const session of [...this.#sessions.values()]) session.end(new Error('the backend was closed'));
  }

  #use(session: Session): void {
    session.users++;
    clearTimeout(session.idle);
    session.idle = undefined;
  }

  #unuse(session: Session): void {
    if (--session.users > 0 || session.lost.aborted) return;
    clearTimeout(session.idle);
    session.idle = setTimeout(() => session.users === 0 && session.end(new Error('the session was idle')), SESSION_IDLE_MS);
    session.idle.unref();
  }

  #connect(ttlMs: number): Session {
    const client = createClient(this.#hosts, { sessionTimeout: ttlMs, spinDelay: 100, retries: 0 });
    if (this.#auth) client.addAuthInfo('digest', this.#auth);
    const controller = new AbortController();
    setMaxListeners(0, controller.signal); // every lock and waiter on the session listens to it
    let connected = false;
    let closed = false;
    const stopWatchdog = cutWhenSilent(client, (2 * ttlMs) / 3, () => connected);
    const close = () => {
      if (closed) return;
      closed = true;
      stopWatchdog();
      client.close();
    };
    /** Stops using the session; closes it now if connected, else once it reconnects (see below). */
    const end = (reason: Error) => {
      clearTimeout(session.idle);
      controller.abort(reason);
      if (this.#sessions.get(ttlMs) === session) this.#sessions.delete(ttlMs);
      if (connected || this.#closed) close();
    };
    const ready = new Promise<void>((resolve, reject) => {
      let settled = false;
      const fail = (error: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        end(error);
        close(); // the handshake never finished: no session to let expire
        reject(error);
      };
      const timer = setTimeout(
        () =>
          fail(new BackendUnavailableError(this.name, 'connect', { cause: new Error(`no session within ${this.#connectTimeoutMs} ms`) })),
        this.#connectTimeoutMs,
      );
      client.once('connected', () => {
        const granted = client.getSessionTimeout();
        if (granted !== ttlMs) {
          const cause = new Error(
            `the server granted a ${granted} ms session for a ${ttlMs} ms ttl; use a ttl within its minSessionTimeout..maxSessionTimeout`,
          );
          return fail(new BackendError(this.name, 'connect', { cause }));
        }
        settled = true;
        clearTimeout(timer);
        resolve();
      });
      controller.signal.addEventListener('abort', () =>
        fail(new BackendUnavailableError(this.name, 'connect', { cause: controller.signal.reason })),
      );
    });
    ready.catch(() => undefined);
    // Standard policy: a suspended connection means ownership is uncertain, so its locks are lost
    // at once. The client is closed only once it has reconnected: a close queued while it is
    // disconnected does not end the session (the client resumes it and keeps it alive), whereas a
    // close on a live connection makes the server delete our nodes right away.
    client.on('connected', () => {
      connected = true;
      // Outside the client's own state change, which would otherwise overwrite the closing state.
      if (controller.signal.aborted) setImmediate(close);
    });
    client.on('disconnected', () => {
      connected = false;
      end(new Error('the ZooKeeper connection was lost'));
    });
    client.on('expired', () => {
      end(new Error('the ZooKeeper session expired'));
      close();
    });
    client.on('authenticationFailed', () => {
      end(new Error('ZooKeeper authentication failed'));
      close();
    });
    const session: Session = { client, ttlMs, lost: controller.signal, ready, end, users: 0, idle: undefined };
    client.connect();
    return session;
  }

  #lease(
    req: AcquireRequest,
    session: Session,
    path: string,
    zxid: bigint,
    offset: bigint,
    acquiredAt: number,
    deleted: AbortSignal,
    shared: boolean,
  ): ZooKeeperLease {
    const lost = new AbortController();
    const onLost = (source: AbortSignal) => () => lost.abort(source.reason);
    const onSessionLost = onLost(session.lost);
    const onDeleted = onLost(deleted);
    session.lost.addEventListener('abort', onSessionLost, { once: true });
    deleted.addEventListener('abort', onDeleted, { once: true });
    let watching = true;
    const stopWatching = () => {
      if (!watching) return;
      watching = false;
      session.lost.removeEventListener('abort', onSessionLost);
      deleted.removeEventListener('abort', onDeleted);
      this.#unuse(session);
    };
    // A lease lost without a release (its node deleted by someone) stops using the session too.
    lost.signal.addEventListener('abort', stopWatching, { once: true });
    if (deleted.aborted) onDeleted();
    return {
      key: req.key,
      owner: req.owner,
      token: zxid + offset,
      zxid,
      offset,
      acquiredAt,
      path,
      session,
      lost: lost.signal,
      stopWatching,
      ...(shared ? { shared: true as const } : {}),
    };
  }

  /** Creates our sequential node `<name>-<sequence>`, creating the key's node first when it is missing. */
  async #createNode(session: Session, parent: string, name: string): Promise<string> {
    const data = Buffer.from(name);
    for (let attempt = 0; ; attempt++) {
      try {
        return (await this.#request<string>(session, (cb) =>
          session.client.create(`${parent}/${name}-`, data, CreateMode.EPHEMERAL_SEQUENTIAL, cb),
        ))!;
      } catch (error) {
        if (codeOf(error) !== Code.NO_NODE || attempt > 20) throw this.#error('acquire', error);
      }
      // The key's node is missing (first use, or reaped by a release since): create it, racing others.
      await this.#ensurePath(session, parent);
    }
  }

  /**
   * Joins a shared key's queue with our claim `<name>-<sequence>`, or throws LimitMismatchError
   * when live claims were made with another limit. Every live claim has the same limit, because
   * each is created by a multi-op that makes sure of it:
   * - beside live claims (whose names carry their limit), with a check that one of them still
   *   exists: a node with children cannot be removed, so it is the same key node and the limit
   *   still holds;
   * - when the key node has no claim, with a write of its data at the version read with the
   *   listing (so any claim made since, which writes it too, fails this one), or, when it has no
   *   child at all, by removing it at that version and making it anew (which fails if anything was
   *   added since, whatever happened to it meanwhile).
   * Without this, a newcomer with another limit joined first and withdrew later: waiters that saw
   * it in between failed with its limit, and ones granted after the claims it was measured
   * against left could not tell which limit held.
   */
  async #joinShared(session: Session, parent: string, name: string, shared: { key: string; limit: number }): Promise<string> {
    const data = Buffer.from(String(shared.limit));
    for (let attempt = 0; attempt < 100; attempt++) {
      const listing = await this.#call<[string[], Stat | undefined]>(
        session,
        'acquire',
        (cb) => session.client.getChildren(parent, undefined, (error, children, stat) => cb(error, [children, stat])),
        [Code.NO_NODE],
      );
      const multi = session.client.transaction();
      if (!listing) {
        await this.#ensurePath(session, parent.slice(0, parent.lastIndexOf('/')));
        multi.create(parent, data, CreateMode.PERSISTENT).setData(parent, data, -1);
      } else {
        const [children, stat] = listing;
        const claims = children.filter((n) => n.startsWith(NODE_PREFIX)).sort(bySequence);
        const newest = claims.at(-1);
        if (newest) {
          const { limit } = claimOf(newest);
          if (limit !== shared.limit) throw new LimitMismatchError(shared.key, limit, shared.limit);
          multi.check(`${parent}/${newest}`, -1);
        } else if (children.length === 0) {
          // Version 0 would read as "any" (see Transaction): made anew, the node is at version 1.
          multi.remove(parent, stat!.version).create(parent, data, CreateMode.PERSISTENT).setData(parent, data, -1);
        } else if (stat!.version === 0) {
          // Only token floors under it, and a version that a multi-op would read as "any": move it on, look again.
          await this.#call(session, 'acquire', (cb) => session.client.transaction().setData(parent, data, -1).commit(cb), [Code.NO_NODE]);
          continue;
        } else {
          multi.setData(parent, data, stat!.version);
        }
      }
      multi.create(`${parent}/${name}-`, Buffer.from(name), CreateMode.EPHEMERAL_SEQUENTIAL);
      const results = await this.#call<unknown[]>(session, 'acquire', (cb) => multi.commit(cb), [
        Code.NO_NODE,
        Code.NODE_EXISTS,
        Code.NOT_EMPTY,
        Code.BAD_VERSION,
      ]);
      const created = results?.at(-1) as { path?: string } | undefined;
      if (created?.path) return created.path;
    }
    throw new BackendError(this.name, 'acquire', {
      cause: new Error(`the queue of ${parent} kept changing under 100 attempts to join it`),
    });
  }

  /** Creates `path` and any missing ancestors (persistent, empty); an existing node is fine. */
  async #ensurePath(session: Session, path: string): Promise<void> {
    const create = () => this.#request(session, (cb) => session.client.create(path, EMPTY, CreateMode.PERSISTENT, cb), [Code.NODE_EXISTS]);
    try {
      await create();
    } catch (error) {
      if (codeOf(error) !== Code.NO_NODE) throw this.#error('acquire', error);
      await this.#ensurePath(session, path.slice(0, path.lastIndexOf('/')));
      await create().catch((again: unknown) => {
        throw this.#error('acquire', again);
      });
    }
  }

  /** The key's queue in order, and its token offset (the largest `floor-` child, normally the only one). */
  async #children(session: Session, parent: string): Promise<{ queue: string[]; offset: bigint }> {
    const children =
      (await this.#call<string[]>(session, 'acquire', (cb) => session.client.getChildren(parent, undefined, cb), [Code.NO_NODE])) ?? [];
    let offset = 0n;
    for (const name of children) {
      if (!name.startsWith(FLOOR_PREFIX)) continue;
      const value = BigInt(name.slice(FLOOR_PREFIX.length));
      if (value > offset) offset = value;
    }
    return { queue: children.filter((n) => n.startsWith(NODE_PREFIX)).sort(bySequence), offset };
  }

  /** Resolves when `path` no longer exists; rejects with `signal.reason`, or when the session is lost. */
  #gone(session: Session, path: string, signal: AbortSignal): Promise<void> {
    // Any event on the watch means the predecessor changed: look at the queue again.
    return this.#watching(session, signal, (settle) =>
      session.client.exists(
        path,
        () => settle(),
        (error, stat) => {
          if (error) settle(this.#error('acquire', error));
          else if (!stat) settle();
        },
      ),
    );
  }

  /** A wait on a watch that `start` sets: settles when it calls `settle`, the signal aborts or the session is lost. */
  #watching(session: Session, signal: AbortSignal, start: (settle: (error?: unknown) => void) => void): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const settle = (error?: unknown) => {
        signal.removeEventListener('abort', onAbort);
        session.lost.removeEventListener('abort', onLost);
        if (error === undefined) resolve();
        else reject(error);
      };
      const onAbort = () => settle(signal.reason);
      const onLost = () => settle(new BackendUnavailableError(this.name, 'acquire', { cause: session.lost.reason }));
      if (signal.aborted) return onAbort();
      if (session.lost.aborted) return onLost();
      signal.addEventListener('abort', onAbort, { once: true });
      session.lost.addEventListener('abort', onLost, { once: true });
      start(settle);
    });
  }

  async #remove(session: Session, path: string): Promise<void> {
    await this.#call(session, 'release', (cb) => session.client.remove(path, -1, cb), [Code.NO_NODE]);
  }

  /** A create whose reply never came may still have made our node: find it by its name (which holds our owner id). */
  async #removeOwn(session: Session, parent: string, name: string): Promise<void> {
    for (const child of (await this.#children(session, parent)).queue) {
      if (child.startsWith(`${name}-`)) await this.#remove(session, `${parent}/${child}`);
    }
  }

  /**
   * Resolves when the key's claims differ from `seen` (at once if they already do), as read by the
   * same request that sets the watch; rejects with `signal.reason`, or when the session is lost.
   */
  #childrenChanged(session: Session, parent: string, seen: readonly string[], signal: AbortSignal): Promise<void> {
    return this.#watching(session, signal, (settle) =>
      session.client.getChildren(
        parent,
        () => settle(),
        (error, children) => {
          if (error) return settle(codeOf(error) === Code.NO_NODE ? undefined : this.#error('acquire', error));
          const now = children.filter((n) => n.startsWith(NODE_PREFIX)).sort(bySequence);
          if (now.length !== seen.length || now.some((n, i) => n !== seen[i])) settle();
        },
      ),
    );
  }

  /**
   * Removes the key's node if it is still empty a little later. Deferred so that a key taken again
   * and again (the common case) is not deleted and re-created on every cycle, at two writes each;
   * a concurrent acquirer that finds it gone re-creates it.
   */
  #reap(session: Session, parent: string): void {
    this.#cancelReap(parent);
    const run = async () => {
      if (this.#reaps.get(parent)?.run === run) this.#reaps.delete(parent);
      if (session.lost.aborted) return;
      await this.#request(session, (cb) => session.client.remove(parent, -1, cb), [Code.NO_NODE, Code.NOT_EMPTY]).catch(() => undefined);
    };
    const timer = setTimeout(() => void run(), REAP_DELAY_MS);
    timer.unref();
    this.#reaps.set(parent, { timer, run });
  }

  #cancelReap(parent: string): void {
    const reap = this.#reaps.get(parent);
    if (!reap) return;
    clearTimeout(reap.timer);
    this.#reaps.delete(parent);
  }

  async #call<T>(
    session: Session,
    operation: string,
    start: (cb: (error: Error | null, result?: T) => void) => void,
    accept: readonly number[] = [],
  ): Promise<T | undefined> {
    if (session.lost.aborted) throw new BackendUnavailableError(this.name, operation, { cause: session.lost.reason });
    try {
      return await this.#request(session, start as Parameters<typeof zk<T>>[0], accept);
    } catch (error) {
      throw this.#error(operation, error);
    }
  }

  /**
   * One request on the session, bounded. node-zookeeper-client never declares a silent connection
   * dead (it only sends another ping), so a request would wait as long as the partition lasts. A
   * request without an answer within a ttl (at least 2 s) means the session can no longer be
   * counted on: it is ended (the standard policy), which fails everything waiting on it.
   */
  #request<T>(session: Session, start: Parameters<typeof zk<T>>[0], accept: readonly number[] = []): Promise<T | undefined> {
    const ms = Math.max(2000, session.ttlMs);
    return withTimeout(zk(start, accept), ms, () => {
      const error = noAnswer(this.name, 'request', ms);
      session.end(error);
      return error;
    });
  }

  #error(operation: string, error: unknown): Error {
    return backendFailure(this.name, operation, error, isUnavailable);
  }
}

/**
 * A ZooKeeper backend. @throws InvalidArgumentError for bad options; store failures surface as
 * BackendUnavailableError / BackendError from the Locker's calls.
 */
export function zookeeperBackend(options: ZooKeeperBackendOptions): ZooKeeperBackend {
  return new ZooKeeperBackend(options);
}
