// Redlock: one lock over several independent Redis nodes, granted by a majority. Long because the
// majority rule (attempt, tokens, give-backs on the minority, drift) is one piece read top to bottom.
import { BackendUnavailableError, InvalidArgumentError, type Capabilities, type ClaimInfo, type LockBackend } from '@deadbolt/core';
import {
  InFlight,
  pollForLease,
  readOptions,
  rules,
  wallMicros,
  type AcquireRequest,
  type Lease,
  type Rule,
  type Rules,
  type StoreUrl,
  type StoreView,
} from '@deadbolt/core/backend';
import type { Redis } from 'ioredis';
import { isCluster, isRedisClient, type ValkeyClient } from './connection.js';
import { RedisBackend, redisOptionRules, storeOf, type RedisBackendOptions, type RedisLease } from './redis-backend.js';
import type { RedisStore } from './store.js';

/** Options of `redlockBackend`; unknown names and bad values are `InvalidArgumentError` before any connection. */
export interface RedlockBackendOptions {
  /**
   * The independent Redis nodes (not replicas of each other, not one cluster): `redis://` urls,
   * or your own ioredis or iovalkey clients (`close()` leaves those open). At least 1; use an odd
   * number, 3 or 5: a lock needs a majority, so 3 nodes ride out one failure and 5 ride out two.
   */
  nodes: readonly (string | Redis | ValkeyClient)[];
  /** What keeps this backend's locks apart from another's on the same nodes: the prefix of every key. Default `deadbolt:`. Must not contain `{` or `}`. */
  namespace?: string;
  /** Another name for `namespace` (Redis's word for it); give one of the two. */
  prefix?: string;
  /**
   * The longest ttl a lock may ask for, and how long a node that lost its data (restarted empty,
   * or new) refuses to grant: by then every lease it may have forgotten has ended. Default 60 000.
   */
  maxTtlMs?: number;
  /** Clock drift allowed between the nodes and this process, as a share of the ttl (plus 2 ms). Default 0.01. */
  driftFactor?: number;
  /** A waiter retries after a random pause of up to this long (doubling from 5 ms; never more than a quarter of the ttl). Default 100 ms. */
  maxPollDelayMs?: number;
  /** Another name for `maxPollDelayMs` (Redlock's word for it); give one of the two. */
  retryDelayMs?: number;
  /** Per node, for connections made from urls. Default 2000 ms. */
  connectTimeoutMs?: number;
  /** Per node, for connections made from urls: the longest wait for a reply. Default 5000 ms. */
  commandTimeoutMs?: number;
  /** Accept nodes that may evict keys (see `RedisBackendOptions.allowEviction`). Default false. */
  allowEviction?: boolean;
}

/** A Redlock grant: a majority of the nodes' leases, its token the largest of theirs. */
export interface RedlockLease extends Lease {
  /** Each node's lease, where that node granted (index = node). */
  readonly parts: readonly (RedisLease | undefined)[];
}

/**
 * The nodes: 1 to 99 `redis://` urls or ioredis (or iovalkey) clients, no server twice (by host and port, as
 * written: two names of one host are not caught). One server named twice would count twice
 * towards the majority, so with 3 nodes it alone could grant a lock.
 */
const nodeUrl = rules.url(['redis', 'rediss']);
/** A Redlock node as given: a URL, or a client of yours (a union, so declarations print it as written: see `RedisClient`). */
type RedlockNode = StoreUrl | Redis;
const nodesRule: Rule<RedlockNode[]> = {
  check(value, name) {
    if (!Array.isArray(value) || value.length === 0 || value.length > 99)
      return rules.refuse(name, 'an array of 1 to 99 redis:// urls or ioredis (or iovalkey) clients', value);
    const seen = new Set<string>();
    return value.map((node: unknown, i) => {
      const read = isNodeClient(node) ? node : nodeUrl.check(node, `${name}[${i}]`);
      if (!isNodeClient(read) && read.hosts.length !== 1) throw new InvalidArgumentError(`${name}[${i}] must name one Redis server`);
      const { host, port } = isNodeClient(read) ? { host: read.options.host ?? 'localhost', port: read.options.port } : read.hosts[0]!;
      const where = `${host.toLowerCase()}:${port ?? 6379}`;
      if (seen.has(where))
        throw new InvalidArgumentError(
          `${name}[${i}] names a Redis server already in the list (${where}): one server would count twice towards the majority`,
        );
      seen.add(where);
      return read;
    });
  },
  hostile: [
    null,
    'redis://127.0.0.1:6379',
    [],
    ['redis://127.0.0.1:6379', 'redis://127.0.0.1:6379'],
    ['redis://127.0.0.1:6379', 'redis://LOCALHOST:6379', 'redis://localhost'],
    [5],
    ['nonsense'],
  ],
};

/** How each option of `redlockBackend` is checked (see core's options.ts); the conformance suite feeds it hostile values. */
export const redlockOptionRules = {
  nodes: rules.required(nodesRule),
  namespace: redisOptionRules.namespace,
  prefix: redisOptionRules.prefix,
  maxTtlMs: rules.wholeMs(1),
  driftFactor: rules.share(0, 0.5),
  maxPollDelayMs: rules.ms(),
  retryDelayMs: rules.alias('maxPollDelayMs', rules.ms()),
  connectTimeoutMs: rules.ms(),
  commandTimeoutMs: rules.ms(),
  allowEviction: rules.flag,
} satisfies Rules<RedlockBackendOptions>;

/** A node's reply to one step: its lease (or true), nothing (busy, or refusing), unreachable, or not yet in. */
type Outcome<T> = { ok: T } | { busy: true } | { down: unknown } | { pending: true };
const BUSY = { busy: true } as const;
const PENDING = { pending: true } as const;

/**
 * Redlock over N independent Redis nodes: a lock is held when a majority of nodes granted it
 * within its validity time (ttl − time taken − drift), each node with the single-node backend's
 * owner-checked, server-expired lease.
 *
 * Fencing tokens are strictly increasing across the whole deployment, not per node: a grant
 * takes T = the largest of its majority's node tokens and, before it is reported, lifts the token
 * counter of every node it holds to T (owner-checked, so each lift happens while that node still
 * holds it); it is reported only when a majority was lifted. Any later majority shares a node with
 * that lifted majority, and that node granted the later lock after the lift, so above T. A node
 * that lost its data cannot break this or exclusion, because it grants nothing until every lease
 * it could have forgotten has ended (`maxTtlMs`, counted on its own clock from when it was found
 * empty); its tokens then restart from its clock (in µs), above any token that counts from a
 * clock not ahead of it by more than that time less the proposal's lead (below).
 *
 * The lift costs a round trip, and node tokens come from each node's clock, so they always differ.
 * So every attempt asks each node for a token of at least P, this process's clock (µs) plus a
 * lead of min(100 ms, maxTtlMs / 10): a node whose clock and counter are below P grants P itself.
 * When a majority did, that majority already stands at T = P and nothing is lifted; a node whose
 * clock runs ahead of ours by more than the lead, or a counter left higher by a contender, only
 * brings the lift back. P is a hint like `minToken`, never trusted: T is still the largest token
 * granted.
 */
export class RedlockBackend implements LockBackend<RedlockLease> {
  readonly name = 'redlock';
  /** The nodes' servers, those given as URLs (`LockBackend.address`). */
  readonly address: string | undefined;
  readonly capabilities: Capabilities;
  readonly #nodes: RedisBackend[];
  /** A part on every node, for the steps every node takes (`#onNodes`). */
  readonly #everyNode: readonly true[];
  /** Key names, the same on every node (they share the prefix): the first node's. */
  readonly #names: RedisStore;
  readonly #quorum: number;
  readonly #driftFactor: number;
  readonly #maxPollDelayMs: number;
  /** How far ahead of this process's clock an attempt's proposed token is, µs (see the class). */
  readonly #leadUs: number;
  /** Acquisitions under way: `close()` lets them finish first, and refuses new ones. */
  readonly #acquiring: InFlight;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: RedlockBackendOptions) {
    const options = readOptions(raw, redlockOptionRules, 'redlockBackend');
    const nodes = options.nodes;
    const maxTtl = options.maxTtlMs ?? 60_000;
    const drift = options.driftFactor ?? 0.01;
    const retry = options.maxPollDelayMs ?? 100;
    this.#nodes = nodes.map((node) =>
      redisNode(node, {
        namespace: options.namespace ?? 'deadbolt:',
        fifo: false,
        connectTimeoutMs: options.connectTimeoutMs,
        commandTimeoutMs: options.commandTimeoutMs,
        allowEviction: options.allowEviction,
        restartGuardMs: maxTtl,
      }),
    );
    this.#everyNode = this.#nodes.map(() => true);
    this.address = this.#nodes.flatMap((node) => node.address ?? []).join(',') || undefined;
    this.#names = storeOf.of(this.#nodes[0]!);
    this.#quorum = Math.floor(this.#nodes.length / 2) + 1;
    this.#driftFactor = drift;
    this.#maxPollDelayMs = retry;
    this.#leadUs = Math.floor(Math.min(100, maxTtl / 10) * 1000);
    this.#acquiring = new InFlight(this.name, options.commandTimeoutMs ?? 5000);
    this.capabilities = {
      fairness: 'none',
      lease: 'ttl',
      wake: 'poll',
      maxTtlMs: maxTtl,
      minToken: true,
    };
  }

  /** The nodes' own backends (for inspection: each node's client is `nodes[i].client`). */
  get nodes(): readonly RedisBackend[] {
    return this.#nodes;
  }

  acquire(req: AcquireRequest): Promise<RedlockLease | null> {
    if (!req.wait) return this.#acquiring.track(() => this.#attempt(req));
    return this.#acquiring.track(() =>
      pollForLease(
        req.key,
        req.signal,
        () => this.#attempt(req),
        (lease) => this.release(lease),
        {
          minDelayMs: Math.min(5, this.#maxPollDelayMs),
          maxDelayMs: Math.min(this.#maxPollDelayMs, Math.max(1, Math.floor(req.ttlMs / 4))),
        },
      ),
    );
  }

  async renew(lease: RedlockLease, ttlMs: number): Promise<boolean> {
    const started = performance.now();
    const outcomes = await this.#onNodes(lease.parts, (node, part) => node.renew(part, ttlMs).then((ok) => ok || null));
    const renewed = outcomes.filter((o) => 'ok' in o).length;
    // Not a majority within the new validity: the lock cannot be counted on (core then reports it lost).
    if (renewed >= this.#quorum && performance.now() - started < this.#validity(ttlMs)) return true;
    this.#failIfDown(outcomes, 'renew');
    return false;
  }

  async release(lease: RedlockLease): Promise<void> {
    // Settles once a majority released: the lock is then free for anyone (no majority can hold
    // it), and waiting for the slowest node made every release as slow as the slowest of the
    // nodes. The other nodes' releases go on (each owner-checked, and ahead of any later command
    // of this backend on that node's connection), and close() waits for them.
    const outcomes = await this.#onNodes(lease.parts, (node, part) => node.release(part).then(() => true));
    if (outcomes.filter((o) => 'down' in o).length >= this.#quorum) this.#failIfDown(outcomes, 'release');
  }

  /**
   * `LockBackend.forceRelease` on every node; true when any node held it for `owner`.
   * @throws BackendUnavailableError when a majority does not answer.
   */
  async forceRelease(key: string, owner: string): Promise<boolean> {
    const outcomes = await this.#onNodes(this.#everyNode, (node) => node.forceRelease(key, owner, 'mutex'), false);
    if (outcomes.filter((o) => 'down' in o).length >= this.#quorum) this.#failIfDown(outcomes, 'force release');
    return outcomes.some((o) => 'ok' in o && o.ok === true);
  }

  /** Lifts every held node's counter; true when a majority was lifted while still held. */
  async raiseTokenFloor(lease: RedlockLease, floor: bigint): Promise<boolean> {
    const outcomes = await this.#onNodes(lease.parts, (node, part) => node.raiseTokenFloor(part, floor).then((ok) => ok || null));
    if (outcomes.filter((o) => 'ok' in o).length >= this.#quorum) return true;
    this.#failIfDown(outcomes, 'raise token floor');
    return false;
  }

  /**
   * `LockBackend.tokenFloor` on every node: raised where asked on each, and the largest a majority
   * answered (a floor raised through this backend reached a majority, which any majority meets).
   * @throws BackendUnavailableError when a majority does not answer.
   */
  async tokenFloor(raise?: bigint): Promise<bigint> {
    return this.#largest(await this.#onNodes(this.#everyNode, (node) => node.tokenFloor(raise), false), 'token floor');
  }

  /**
   * `LockBackend.tokenCeiling`: the largest of a majority's (each Redlock token was lifted on a
   * majority, which any majority meets). @throws BackendUnavailableError when a majority does not answer.
   */
  async tokenCeiling(): Promise<bigint> {
    return this.#largest(await this.#onNodes(this.#everyNode, (node) => node.tokenCeiling(), false), 'token ceiling');
  }

  /** The largest number of those a majority answered. */
  #largest(outcomes: Outcome<bigint>[], operation: string): bigint {
    this.#failIfDown(outcomes, operation);
    let largest = 0n;
    for (const o of outcomes) if ('ok' in o && o.ok > largest) largest = o.ok;
    return largest;
  }

  /**
   * `LockBackend.inspect`: every node's view; the holder is an owner a majority of nodes hold for,
   * with the token and the time left a majority stands at. Waiters poll and
   * keep no place: `null`. @throws BackendUnavailableError when a majority does not answer.
   */
  async inspect(key: string): Promise<StoreView> {
    const outcomes = await this.#onNodes(this.#everyNode, (node) => node.inspect(key, 'mutex'), false);
    this.#failIfDown(outcomes, 'inspect');
    const seen = new Map<string, ClaimInfo[]>();
    for (const o of outcomes) if ('ok' in o) for (const h of o.ok.holders) seen.set(h.owner!, [...(seen.get(h.owner!) ?? []), h]);
    const holders = [...seen.entries()]
      .filter(([, parts]) => parts.length >= this.#quorum)
      .map(([owner, parts]) => ({
        owner,
        // The lock's token is the one a majority stands at (its grant lifted them there); a node
        // that granted after the majority may stand higher, one not lifted lower.
        token: parts.map((p) => p.token ?? 0n).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))[this.#quorum - 1]!,
        ttlLeftMs: parts.map((p) => p.ttlLeftMs ?? 0).sort((a, b) => b - a)[this.#quorum - 1]!,
      }));
    return { holders, waiters: null };
  }

  /** Lets acquisitions under way finish giving back what they won, then closes every node; later acquisitions reject with `LockerClosedError`. */
  close(): Promise<void> {
    return this.#acquiring.close(() => Promise.all(this.#nodes.map((node) => node.close())));
  }

  /** One Redlock round: every node at once; a majority within the validity, or everything given back. */
  async #attempt(req: AcquireRequest): Promise<RedlockLease | null> {
    const started = performance.now();
    // The proposed token (see the class): a migration's least token, when higher, wins.
    const proposal = BigInt(wallMicros() + this.#leadUs);
    const one = { ...req, wait: false, minToken: req.minToken !== undefined && req.minToken > proposal ? req.minToken : proposal };
    // A grant that comes after the majority needs nothing more: that node keeps an owner-checked
    // part (below), so renewals and the release reach it; after a failed attempt, the give-back
    // follows the grant on the same connection.
    const outcomes = await this.#onNodes(this.#everyNode, (node) => node.acquire(one));
    // A node that did not answer (yet) may have granted all the same: it keeps a part, so that a
    // release, renewal or lift reaches it too (each is owner-checked there). One pass, no arrays
    // made on the way: this runs on every attempt, for every node.
    const parts: (RedisLease | undefined)[] = new Array(outcomes.length);
    let unanswered: RedisLease | undefined;
    let granted = 0;
    let token = 0n;
    for (let i = 0; i < outcomes.length; i++) {
      const o = outcomes[i]!;
      if ('ok' in o) {
        parts[i] = o.ok;
        granted++;
        if (o.ok.token > token) token = o.ok.token;
      } else if ('busy' in o) {
        parts[i] = undefined;
      } else {
        parts[i] = unanswered ??= {
          space: 'mutex',
          key: req.key,
          owner: req.owner,
          token: 0n,
          acquiredAt: started,
          keys: this.#names.keysFor(req.key),
        };
      }
    }
    const giveBack = () => this.release({ key: req.key, owner: req.owner, token: 0n, acquiredAt: started, parts }).catch(() => undefined);
    if (granted < this.#quorum || performance.now() - started >= this.#validity(req.ttlMs)) {
      await giveBack();
      this.#failIfDown(outcomes, 'acquire');
      return null;
    }
    if (!(await this.#lift(outcomes, token)) || performance.now() - started >= this.#validity(req.ttlMs)) {
      await giveBack();
      return null;
    }
    // The nodes started their ttl no earlier than `started`; counting from `drift` before it
    // leaves room for their clocks running fast.
    return { key: req.key, owner: req.owner, token, acquiredAt: started - this.#drift(req.ttlMs), parts };
  }

  /**
   * Lifts token counters to `token` on a majority of the nodes that granted (a node that issued
   * `token` counts as lifted already): the nodes with the highest tokens first, only as many as a
   * majority needs, then the others if some failed. True when a majority stands at `token`.
   */
  async #lift(grants: Outcome<RedisLease>[], token: bigint): Promise<boolean> {
    let lifted = 0;
    for (const o of grants) if ('ok' in o && o.ok.token === token) lifted++;
    // The common case: the proposal made a majority's tokens equal, and nothing needs lifting.
    if (lifted >= this.#quorum) return true;
    const parts = grants.map((o) => ('ok' in o ? o.ok : undefined));
    const rest = parts
      .map((p, i) => [p, i] as const)
      .filter(([p]) => p && p.token !== token)
      .sort(([a], [b]) => (a!.token > b!.token ? -1 : 1));
    while (lifted < this.#quorum && rest.length > 0) {
      const batch = rest.splice(0, this.#quorum - lifted);
      const chosen = parts.map((p, i) => (batch.some(([, j]) => j === i) ? p : undefined));
      const outcomes = await this.#onNodes(chosen, (node, part) => node.raiseTokenFloor(part, token).then((ok) => ok || null));
      lifted += outcomes.filter((o) => 'ok' in o).length;
    }
    return lifted >= this.#quorum;
  }

  #drift(ttlMs: number): number {
    return ttlMs * this.#driftFactor + 2;
  }

  #validity(ttlMs: number): number {
    return ttlMs - this.#drift(ttlMs);
  }

  /** A majority of nodes unreachable: the deployment is down, which is not "busy" or "lost". */
  #failIfDown(outcomes: Outcome<unknown>[], operation: string): void {
    const down = outcomes.filter((o): o is { down: unknown } => 'down' in o);
    if (this.#nodes.length - down.length < this.#quorum) {
      throw new BackendUnavailableError(this.name, operation, {
        cause: new AggregateError(
          down.map((d) => d.down),
          `${down.length} of ${this.#nodes.length} Redis nodes unreachable`,
        ),
      });
    }
  }

  /**
   * Runs `step` at once on every node that has a part; never rejects. With `early`, settles as
   * soon as a majority succeeded (a slow node must not slow every call), the rest `pending`: their
   * requests go on, and `close()` waits for them; otherwise waits for every node, so that down
   * nodes count as such.
   */
  #onNodes<P, T>(
    parts: readonly (P | undefined)[],
    step: (node: RedisBackend, part: P) => Promise<T | null>,
    early = true,
  ): Promise<Outcome<T>[]> {
    return new Promise((resolve) => {
      const outcomes: Outcome<T>[] = new Array(parts.length);
      const sent: Promise<unknown>[] = [];
      // Counted as replies come, rather than found by scanning the outcomes at each reply.
      let waiting = 0;
      let succeeded = 0;
      let settled = false;
      const settle = () => {
        if (settled || (waiting > 0 && (!early || succeeded < this.#quorum))) return;
        settled = true;
        if (waiting > 0) {
          this.#acquiring.keep(Promise.allSettled(sent));
          for (let i = 0; i < outcomes.length; i++) outcomes[i] ??= PENDING;
        }
        resolve(outcomes);
      };
      for (let i = 0; i < parts.length; i++) {
        const part = parts[i];
        if (part === undefined) {
          outcomes[i] = BUSY;
          continue;
        }
        const node = this.#nodes[i]!;
        // A node whose connection is known broken is down now: its commands would only wait in
        // ioredis's queue for the next reconnect attempt (up to seconds) to fail.
        const status = node.client.status;
        const call =
          status === 'reconnecting' || status === 'close' || status === 'end'
            ? Promise.reject(new Error(`the connection to ${nodeName(node)} is down (${status})`))
            : step(node, part);
        waiting++;
        sent.push(call);
        // A reply after the outcomes were handed over changes nothing in them.
        call.then(
          (result) => {
            if (settled) return;
            waiting--;
            if (result === null) outcomes[i] = BUSY;
            else {
              outcomes[i] = { ok: result };
              succeeded++;
            }
            settle();
          },
          (error: unknown) => {
            if (settled) return;
            waiting--;
            outcomes[i] = { down: error };
            settle();
          },
        );
      }
      settle();
    });
  }
}

function nodeName(node: RedisBackend): string {
  const { host, port } = (node.client as Redis).options;
  return `${host}:${port}`;
}

/** A client given as a node: ioredis's or iovalkey's single-server `Redis` (a Cluster is no Redlock node). */
function isNodeClient(node: unknown): node is Redis {
  return isRedisClient(node) && !isCluster(node);
}

function redisNode(node: StoreUrl | Redis, options: Omit<RedisBackendOptions, 'url' | 'client'>): RedisBackend {
  return isNodeClient(node) ? new RedisBackend({ client: node, ...options }) : new RedisBackend({ url: node.href, ...options });
}

/**
 * A Redlock backend over independent Redis nodes. @throws InvalidArgumentError for bad options;
 * store failures surface later as BackendUnavailableError (a majority of nodes unreachable) or
 * BackendError from the Locker's calls.
 */
export function redlockBackend(options: RedlockBackendOptions): RedlockBackend {
  return new RedlockBackend(options);
}
