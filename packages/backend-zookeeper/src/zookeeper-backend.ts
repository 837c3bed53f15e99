// The ZooKeeper backend: options, and the one queue that mutex waiters and shared claims both join
// (`QueueShape`), its lease, renewal, token floors and release. Sessions are sessions.ts, the
// znodes' requests nodes.ts. Long, most of it the queue and the two floor raises.
import { BackendUnavailableError, InvalidArgumentError, type Capabilities, type LockBackend } from '@deadbolt/core';
import {
  grantable,
  keySpace,
  readOptions,
  rules,
  sharedView,
  sleep,
  type AcquireRequest,
  type KeySpace,
  type Lease,
  type Rules,
  type StoreUrl,
  type StoreView,
} from '@deadbolt/core/backend';
import { TestingHooks } from '@deadbolt/core/testing';
import {
  call,
  childrenChanged,
  children,
  claimOf,
  createNode,
  EMPTY,
  ensurePath,
  FLOOR_PREFIX,
  gone,
  joinShared,
  NODE_PREFIX,
  ownerOf,
  Reaper,
  remove,
  removeOwn,
} from './nodes.js';
import { ZooKeeperSessions, type Session } from './sessions.js';
import { Code, CreateMode, NODE_DELETED, zxidOf, type Stat } from './zookeeper-client.js';

export { bySequence, ownerOf, sequenceOf } from './nodes.js';
export type { ZooKeeperSession } from './sessions.js';

/** Options of `zookeeperBackend`: where the store is (a URL or a client of yours) and how to use it. Unknown names and bad values are `InvalidArgumentError` before any connection. */
export interface ZooKeeperBackendOptions {
  /**
   * `zookeeper://[user:password@]host:port[,host:port...][/chroot]`. The backend opens and closes
   * its own sessions; a user and password are added to each session as `digest` authentication.
   */
  url: string;
  /** What keeps this backend's locks apart from another's on the same ensemble: the parent of every lock node. Default `/deadbolt`. */
  namespace?: string;
  /** Another name for `namespace` (ZooKeeper's word for it); give one of the two. */
  root?: string;
  /** How long to wait for a session to connect before `BackendUnavailableError`. Default 3000 ms. */
  connectTimeoutMs?: number;
  /**
   * The server's `maxSessionTimeout`: the longest ttl this backend accepts (checked before any
   * I/O). Default 40 000 ms, ZooKeeper's default (20 × a tickTime of 2 s).
   */
  maxSessionTimeoutMs?: number;
}

export interface ZooKeeperLease extends Lease {
  readonly path: string;
  /** How its queue grants and lifts its floor: a mutex's, or a shared claim's (a semaphore permit or read-write lock). */
  readonly shape: QueueShape;
  /** Our node's creation zxid; the token is this plus the key's offset at the grant. */
  readonly zxid: bigint;
  readonly offset: bigint;
  readonly session: Session;
  readonly lost: AbortSignal;
  /** Stops listening and gives the lease's use of its session back (once). */
  readonly stopWatching: () => void;
}

/**
 * A znode path as ZooKeeper accepts it: absolute, no empty, `.` or `..` element, none of the
 * characters it refuses (controls, surrogates, U+FFF0 and up), not under its own `/zookeeper`.
 */
export const pathRule = rules.text(
  /^(?!\/zookeeper(?:\/|$))(?:\/(?!\.{1,2}(?:\/|$))[^/\u0000-\u001f\u007f-\u009f\ud800-\uf8ff\ufff0-\uffff]+)+$/,
  'an absolute znode path such as /deadbolt (no ., .., control characters or /zookeeper)',
  ['deadbolt', '/', '/a/', '/a//b', '/.', '/a/..', '/a\u0001', '/zookeeper', '/zookeeper/x'],
);

/**
 * The sessions of `url`'s ensemble (its chroot, and its user and password as digest
 * authentication, on each). @throws InvalidArgumentError for a chroot ZooKeeper would refuse.
 */
export function openSessions(url: StoreUrl, connectTimeoutMs: number): ZooKeeperSessions {
  const chroot = url.path.replace(/\/$/, '');
  if (chroot) pathRule.check(`/${chroot}`, "the url's chroot");
  const hosts = url.hosts.map(({ host, port }) => `${host}:${port ?? 2181}`).join(',') + (chroot ? `/${chroot}` : '');
  const auth = url.username === undefined ? undefined : Buffer.from(`${url.username}:${url.password ?? ''}`);
  return new ZooKeeperSessions(hosts, auth, connectTimeoutMs);
}

/** The rules of where the ensemble is and which part of it is ours: the backend's and the fence's. */
export const ensembleRules = {
  url: rules.required(rules.url(['zookeeper'])),
  namespace: pathRule,
  root: rules.alias('namespace', pathRule),
  connectTimeoutMs: rules.ms(),
};

/** How each option of `zookeeperBackend` is checked (see core's options.ts); the conformance suite feeds it hostile values. */
export const zookeeperOptionRules = {
  ...ensembleRules,
  maxSessionTimeoutMs: rules.wholeMs(1000),
} satisfies Rules<ZooKeeperBackendOptions>;

/** What one kind of claim (a mutex waiter, a shared claim) looks like in a key's queue. */
interface QueueShape {
  readonly parent: string;
  /** Our node's name before the owner id; `lock-` for a mutex, `lock-<S|X><limit>-` for a shared claim. */
  readonly prefix: string;
  /** Creates our node `name` under `parent`; its path. */
  readonly join: (session: Session, name: string) => Promise<string>;
  /** May the claim at `index` of `queue` (in sequence order) be granted? */
  readonly granted: (queue: readonly string[], index: number) => boolean;
  /** Resolves when the claim at `index` of `queue` (not granted) may have become grantable. */
  readonly waitTurn: (session: Session, queue: readonly string[], index: number, signal: AbortSignal) => Promise<void>;
  /** `LockBackend.raiseTokenFloor` of a lease of this shape. */
  readonly raiseFloor: (lease: ZooKeeperLease, floor: bigint) => Promise<boolean>;
}

/** What `@deadbolt/zookeeper/testing` (testing.ts) reads of each backend: not part of its API. */
export const internalsOf = new TestingHooks<
  ZooKeeperBackend,
  { readonly sessions: ZooKeeperSessions; parentOf(key: string, space: KeySpace): string }
>('a ZooKeeperBackend');

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
 *
 * The mutex and the shared claims are one queue (`QueueShape`); sessions.ts keeps the sessions,
 * nodes.ts makes, reads, watches and removes the znodes.
 */
export class ZooKeeperBackend implements LockBackend<ZooKeeperLease> {
  readonly name = 'zookeeper';
  /** The store's servers as given in `url`: `LockBackend.address`. */
  readonly address: string | undefined;
  readonly capabilities: Capabilities = {
    fairness: 'fifo',
    lease: 'session',
    wake: 'push',
    // The server bounds session timeouts to [minSessionTimeout, maxSessionTimeout] (2 and 20 ticks
    // by default); a ttl outside its bounds is refused when the session connects.
    minTtlMs: 1000,
    semaphore: true,
    readWrite: true,
  };
  readonly #root: string;
  readonly #sessions: ZooKeeperSessions;
  readonly #reaper = new Reaper();
  #closed = false;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: ZooKeeperBackendOptions) {
    const options = readOptions(raw, zookeeperOptionRules, 'zookeeperBackend');
    const url = options.url;
    this.address = url.address;
    this.#sessions = openSessions(url, options.connectTimeoutMs ?? 3000);
    this.#root = options.namespace ?? '/deadbolt';
    this.capabilities = { ...this.capabilities, maxTtlMs: options.maxSessionTimeoutMs ?? 40_000 };
    internalsOf.set(this, {
      sessions: this.#sessions,
      parentOf: (key, space) => this.#parentOf(key, space),
    });
  }

  /**
   * The node of `key` in `space`: base64url of its UTF-8 bytes, so every key is a legal name and no
   * two collide. A shared key's (semaphore, read-write lock) is under `#shared`, which no base64url
   * mutex node name can be; its children are `lock-<S|X><limit>-<owner>-<sequence>`, one per claim.
   */
  #parentOf(key: string, space: KeySpace): string {
    return `${this.#root}/${space === 'shared' ? '#shared/' : ''}${Buffer.from(key, 'utf8').toString('base64url')}`;
  }

  /**
   * One queue recipe for every claim; the claim picks its shape. A mutex is granted at the head of
   * the queue. A shared claim follows the shared-key rule (`Claim`): every claim's name carries its
   * mode and limit, so a newcomer with another limit sees it and withdraws, and a blocked claim may
   * be let in by the departure of any claim ahead of it, so it watches the key's children (one
   * watch, set by the same read it judged by) rather than one predecessor.
   */
  acquire(req: AcquireRequest): Promise<ZooKeeperLease | null> {
    const space = keySpace(req);
    const parent = this.#parentOf(req.key, space);
    if (space === 'mutex')
      return this.#acquire(req, {
        parent,
        prefix: NODE_PREFIX,
        join: (session, name) => createNode(session, parent, name),
        granted: (queue, index) => index === 0,
        waitTurn: (session, queue, index, signal) => gone(session, `${parent}/${queue[index - 1]}`, signal),
        raiseFloor: (lease, floor) => this.#raiseMutexFloor(lease, parent, floor),
      });
    const shared = { key: req.key, limit: req.limit };
    return this.#acquire(req, {
      parent,
      prefix: `${NODE_PREFIX}${req.mode === 'exclusive' ? 'X' : 'S'}${req.limit}-`,
      join: (session, name) => joinShared(session, parent, name, shared),
      // Every live claim has our limit (see `joinShared` in nodes.ts).
      granted: (queue, index) => grantable(queue.map(claimOf), index, req.limit),
      waitTurn: (session, queue, _index, signal) => childrenChanged(session, parent, queue, signal),
      raiseFloor: (lease, floor) => this.#raiseSharedFloor(lease, parent, floor),
    });
  }

  async #acquire(req: AcquireRequest, shape: QueueShape): Promise<ZooKeeperLease | null> {
    for (;;) {
      const session = await this.#sessions.session(req.ttlMs);
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
    this.#sessions.use(session);
    let granted = false;
    try {
      const lease = await this.#queueOn(session, req, shape);
      granted = lease !== null;
      return lease;
    } finally {
      if (!granted) this.#sessions.unuse(session);
    }
  }

  async #queueOn(session: Session, req: AcquireRequest, shape: QueueShape): Promise<ZooKeeperLease | null> {
    const { parent } = shape;
    this.#reaper.cancel(parent);
    let path: string | undefined;
    try {
      path = await shape.join(session, shape.prefix + req.owner);
      // Pipelined on the session (ZooKeeper answers in order): our node's stat, with a watch that
      // reports its deletion by anyone (an operator, a test) as a loss once we hold it, and the queue.
      let acquiredAt = performance.now();
      const deleted = new AbortController();
      const ownPath = path;
      const [stat, listing] = await Promise.all([
        call<Stat | null>(session, 'acquire', (cb) =>
          session.client.exists(
            ownPath,
            (event) => event.getType() === NODE_DELETED && deleted.abort(new Error(`lock node ${ownPath} was deleted`)),
            cb,
          ),
        ),
        children(session, parent),
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
          await remove(session, path);
          this.#reaper.later(session, parent);
          return null;
        }
        await shape.waitTurn(session, queue, index, req.signal);
        acquiredAt = performance.now();
        ({ queue, offset } = await children(session, parent));
      }
      return this.#lease(req, session, path, zxidOf(stat), offset, acquiredAt, deleted.signal, shape);
    } catch (error) {
      // A cancelled, timed-out or failed waiter takes its node away before reporting; when the
      // session is gone, the server deletes the node with it.
      if (!session.lost.aborted) {
        const cleanup = path ? remove(session, path) : removeOwn(session, parent, shape.prefix + req.owner);
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
    const stat = await call<Stat | null>(l.session, 'renew', (cb) => l.session.client.exists(l.path, undefined, cb));
    return !!stat && zxidOf(stat) === l.zxid && !l.lost.aborted;
  }

  /** See `LockBackend.raiseTokenFloor`: as the lease's queue shape does it (a mutex's floor, or a shared key's). */
  raiseTokenFloor(lease: ZooKeeperLease, floor: bigint): Promise<boolean> {
    return lease.shape.raiseFloor(lease, floor);
  }

  /**
   * A mutex's floor. Later holders' nodes are newer than ours (higher zxid), so an offset of
   * `floor - our zxid` puts every later token above `floor`; set in one multi-op with a check that
   * our node (so our hold: nobody is granted before it goes) still exists.
   */
  async #raiseMutexFloor(l: ZooKeeperLease, parent: string, floor: bigint): Promise<boolean> {
    const result = await call<unknown[]>(
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
    const result = await call<unknown[]>(
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
      const stat = await call<Stat | null>(l.session, 'raise token floor', (cb) => l.session.client.exists(l.path, undefined, cb));
      if (!stat || zxidOf(stat) !== l.zxid) return false;
      await call(
        l.session,
        'raise token floor',
        (cb) => l.session.client.create(`${parent}/${FLOOR_PREFIX}${floor - l.zxid}`, EMPTY, CreateMode.PERSISTENT, cb),
        [Code.NODE_EXISTS],
      );
    }
    const floors = (
      (await call<string[]>(l.session, 'raise token floor', (cb) => l.session.client.getChildren(parent, undefined, cb), [Code.NO_NODE])) ??
      []
    )
      .filter((name) => name.startsWith(FLOOR_PREFIX))
      .map((name) => BigInt(name.slice(FLOOR_PREFIX.length)));
    const largest = floors.reduce((a, b) => (a > b ? a : b), 0n);
    for (const value of floors) if (value < largest) await remove(l.session, `${parent}/${FLOOR_PREFIX}${value}`).catch(() => undefined);
    return !l.lost.aborted;
  }

  /**
   * `LockBackend.inspect`: the key's nodes in queue order, each with the zxid that made it (a
   * holder's token, plus the key's offset). Leases are sessions, so no time left; a waiter's token
   * is fixed at its grant (the offset may rise meanwhile): `null`.
   */
  inspect(key: string, space: KeySpace): Promise<StoreView> {
    return this.#borrowing(async (session) => {
      const parent = this.#parentOf(key, space);
      const { queue, offset } = await children(session, parent, 'inspect');
      const stats = await Promise.all(
        queue.map((name) => call<Stat | null>(session, 'inspect', (cb) => session.client.exists(`${parent}/${name}`, undefined, cb))),
      );
      // A node gone between the listing and its stat was released or withdrawn meanwhile.
      const nodes = queue.flatMap((name, i) => {
        const stat = stats[i];
        return stat ? [{ name, owner: ownerOf(name), token: zxidOf(stat) + offset, ttlLeftMs: null }] : [];
      });
      if (space === 'shared') {
        const claims = nodes.map(({ name, ...claim }) => ({ ...claim, mode: claimOf(name).mode }));
        return sharedView(claims, nodes[0] && claimOf(nodes[0].name).limit, false);
      }
      const [holder, ...waiting] = nodes.map(({ name: _, ...claim }) => claim);
      return { holders: holder ? [holder] : [], waiters: waiting.map((w) => ({ ...w, token: null })) };
    });
  }

  /**
   * See `LockBackend.forceRelease`: deletes `owner`'s node (its name holds the owner id) from
   * another session, which ZooKeeper allows; its holder's watch sees it go, and so does the waiter
   * behind it. True when the node was listed (deleted now, or by its own release meanwhile).
   */
  forceRelease(key: string, owner: string, space: KeySpace): Promise<boolean> {
    return this.#borrowing(async (session) => {
      const parent = this.#parentOf(key, space);
      const mine = (await children(session, parent, 'force release')).queue.filter((name) => ownerOf(name) === owner);
      for (const name of mine) await remove(session, `${parent}/${name}`);
      return mine.length > 0;
    });
  }

  /**
   * See `LockBackend.tokenFloor`: the data of `<root>/#floor` (no key's node is named with `#`),
   * set at the version read, so two raises at once both count.
   */
  tokenFloor(raise = 0n): Promise<bigint> {
    const path = `${this.#root}/#floor`;
    return this.#borrowing(async (session) => {
      for (;;) {
        const got = await call<{ data: Buffer | undefined; stat: Stat }>(
          session,
          'token floor',
          (cb) => session.client.getData(path, undefined, (error, data, stat) => cb(error, { data, stat })),
          [Code.NO_NODE],
        );
        const floor = got ? BigInt((got.data ?? EMPTY).toString() || '0') : 0n;
        if (raise <= floor) return floor;
        const data = Buffer.from(raise.toString());
        if (!got) {
          await ensurePath(session, this.#root);
          const made = await call(session, 'token floor', (cb) => session.client.create(path, data, CreateMode.PERSISTENT, cb), [
            Code.NODE_EXISTS,
          ]);
          if (made) return raise;
        } else {
          const set = await call(
            session,
            'token floor',
            (cb) => session.client.transaction().setData(path, data, got.stat.version).commit(cb),
            [Code.BAD_VERSION, Code.NO_NODE],
          );
          if (set) return raise;
        }
      }
    });
  }

  /**
   * See `LockBackend.tokenCeiling`: a token is a node's creation zxid plus its key's offset, so the
   * zxid of a node made now plus the largest offset of any key (each key node's `floor-` children),
   * or the floor if that is higher. Reads every key node under the root.
   */
  tokenCeiling(): Promise<bigint> {
    return this.#borrowing(async (session) => {
      await ensurePath(session, this.#root);
      const probe = await call<string>(session, 'token ceiling', (cb) =>
        session.client.create(`${this.#root}/#zxid-`, EMPTY, CreateMode.EPHEMERAL_SEQUENTIAL, cb),
      );
      const stat = await call<Stat | null>(session, 'token ceiling', (cb) => session.client.exists(probe!, undefined, cb));
      await remove(session, probe!);
      const list = async (path: string) =>
        (await call<string[]>(session, 'token ceiling', (cb) => session.client.getChildren(path, undefined, cb), [Code.NO_NODE])) ?? [];
      const keyNodes = [
        ...(await list(this.#root)).filter((name) => !name.startsWith('#')).map((name) => `${this.#root}/${name}`),
        ...(await list(`${this.#root}/#shared`)).map((name) => `${this.#root}/#shared/${name}`),
      ];
      let offset = 0n;
      for (let i = 0; i < keyNodes.length; i += 100) {
        const read = await Promise.all(keyNodes.slice(i, i + 100).map((node) => children(session, node, 'token ceiling')));
        for (const { offset: o } of read) if (o > offset) offset = o;
      }
      const ceiling = zxidOf(stat!) + offset;
      const floor = await this.tokenFloor();
      return ceiling > floor ? ceiling : floor;
    });
  }

  /** `use` with an open session, or one of at most 10 s opened for it (closed when idle): an operator's read or write. */
  async #borrowing<T>(use: (session: Session) => Promise<T>): Promise<T> {
    const ttlMs = this.#sessions.open()[0]?.ttlMs ?? Math.min(10_000, this.capabilities.maxTtlMs!);
    const session = await this.#sessions.session(ttlMs);
    this.#sessions.use(session);
    try {
      return await use(session);
    } finally {
      this.#sessions.unuse(session);
    }
  }

  async release(lease: ZooKeeperLease): Promise<void> {
    const l = lease;
    l.stopWatching();
    // A lost session took its ephemeral node along, and a closed one can delete nothing.
    if (l.session.lost.aborted) return;
    await remove(l.session, l.path);
    this.#reaper.later(l.session, l.path.slice(0, l.path.lastIndexOf('/')));
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#reaper.flush();
    this.#sessions.close();
  }

  #lease(
    req: AcquireRequest,
    session: Session,
    path: string,
    zxid: bigint,
    offset: bigint,
    acquiredAt: number,
    deleted: AbortSignal,
    shape: QueueShape,
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
      this.#sessions.unuse(session);
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
      shape,
    };
  }
}

/**
 * A ZooKeeper backend. @throws InvalidArgumentError for bad options; store failures surface as
 * BackendUnavailableError / BackendError from the Locker's calls.
 */
export function zookeeperBackend(options: ZooKeeperBackendOptions): ZooKeeperBackend {
  return new ZooKeeperBackend(options);
}
