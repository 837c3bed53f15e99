// The in-memory backend and its store: mutex and shared claims with the same semantics as a real
// store (server-side expiry by timers, FIFO waiters, tokens that never repeat), answering on the
// spot (`acquireNow`). Long because the store and the backend over it are one piece: the
// backend only forwards to the store's grants, queues and timers, which read top to bottom.
import {
  keySpace,
  type AcquireRequest,
  type Capabilities,
  type KeySpace,
  type Lease,
  type LockBackend,
  type StoreView,
} from '../kit/backend.js';
import { LimitMismatchError, LockerClosedError } from '../api/errors.js';
import { instance, readOptions, type Rules } from '../kit/options.js';
import { grantable, sharedView } from '../kit/shared.js';
import { DONE } from '../kit/wait.js';
import { after, now, type Timer } from '../kit/time.js';

/** A memory lease: a mutex's, or a shared claim's (a semaphore permit or read-write lock). */
export interface MemoryLease extends Lease {
  readonly space: KeySpace;
}

interface Claim {
  readonly req: AcquireRequest;
  readonly mode: AcquireRequest['mode'];
  /** performance.now() at which a granted claim's lease ends; Infinity while it waits (its process is alive). */
  expiresAt: number;
  /** Set while the claim waits: grants it. */
  grant: ((lease: MemoryLease) => void) | undefined;
  /** Set when granted. */
  token: bigint | undefined;
  timer: Timer | undefined;
}

interface SharedState {
  limit: number;
  /** Live claims in arrival order, granted ones first by the rule's nature. */
  readonly claims: Claim[];
}

interface Holder {
  readonly owner: string;
  readonly token: bigint;
  /** performance.now() at which the lease ends. */
  expiresAt: number;
  /** Armed only while someone waits: an uncontended lock costs no timer. */
  timer: Timer | undefined;
}

interface Waiter {
  readonly req: AcquireRequest;
  readonly grant: (lease: MemoryLease) => void;
}

interface KeyState {
  holder: Holder | undefined;
  readonly waiters: Waiter[];
  /** Listed among the freed entries kept for reuse (`MemoryLockStore.#kept`); it may be in use again since. */
  kept: boolean;
}

/**
 * Arms `entry`'s timer for its expiry (1 ms past it, so that `now >= expiresAt` holds when it
 * fires); `due` runs then unless the timer was cleared or armed again. Unref'd: a lease nobody
 * waits for must not keep the process alive.
 */
function armExpiry(entry: { timer: Timer | undefined; readonly expiresAt: number }, due: () => void): void {
  entry.timer?.cancel();
  entry.timer = after(
    Math.max(0, entry.expiresAt - now()) + 1,
    () => {
      entry.timer = undefined;
      due();
    },
    true,
  );
}

/** How many freed entries the lock table keeps for reuse (see `MemoryLockStore.#dropIfUnused`). */
const KEPT_FREE = 1024;

/**
 * The process's lock table: per key a holder and a FIFO queue of waiters. A key's entry lives
 * while it is held or waited for (reference-counted: a table that dropped an entry while another
 * caller was about to use it would race); at most KEPT_FREE freed ones stay besides, for reuse.
 * So the table never grows with the number of keys ever used. Tokens
 * come from one counter for the whole table, which makes them strictly increasing per key even
 * though a key's entry is dropped between uses.
 */
export class MemoryLockStore {
  readonly #keys = new Map<string, KeyState>();
  /** The keys of the entries kept for reuse, in the order they were listed (at most KEPT_FREE; some may be in use again). */
  readonly #kept = new Set<string>();
  readonly #shared = new Map<string, SharedState>();
  #lastToken = 0n;
  /** `LockBackend.tokenFloor`: kept for the asking; the counter is lifted with it, so every later grant is above it anyway. */
  #floor = 0n;

  /** `LockBackend.acquire` for a shared key: one queue of claims per key, granted by `grantable`. */
  acquireShared(req: AcquireRequest): Promise<MemoryLease | null> {
    req.signal.throwIfAborted();
    this.#expireShared(req.key);
    let state = this.#shared.get(req.key);
    if (state && state.claims.length > 0 && state.limit !== req.limit) {
      return Promise.reject(new LimitMismatchError(req.key, state.limit, req.limit));
    }
    if (!state) this.#shared.set(req.key, (state = { limit: req.limit, claims: [] }));
    state.limit = req.limit;
    const claim: Claim = { req, mode: req.mode, expiresAt: Infinity, grant: undefined, token: undefined, timer: undefined };
    state.claims.push(claim);
    if (grantable(state.claims, state.claims.length - 1, state.limit)) return Promise.resolve(this.#grantClaim(req.key, state, claim));
    if (!req.wait) {
      this.#dropClaim(req.key, state, claim);
      return Promise.resolve(null);
    }
    const { claims } = state;
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        this.#dropClaim(req.key, state, claim);
        reject(req.signal.reason);
      };
      claim.grant = (lease) => {
        req.signal.removeEventListener('abort', onAbort);
        resolve(lease);
      };
      req.signal.addEventListener('abort', onAbort, { once: true });
      // Someone waits now: the granted claims' expiries must free the way on time.
      for (const c of claims) if (!c.grant && !c.timer) this.#armClaimExpiry(req.key, c);
    });
  }

  /** `LockBackend.acquireNow`: a grant or a busy one-shot answer at once; undefined when the request must wait. Never throws. */
  acquireNow(req: AcquireRequest): MemoryLease | null | undefined {
    const state = this.#keys.get(req.key);
    if (!state) return this.#grant(req.key, this.#newState(req.key), req);
    this.#expireIfDue(req.key, state);
    if (inUse(state)) return req.wait ? undefined : null;
    // The lapsed lease's entry normally stays, kept for reuse; looked up again rather than counted on.
    return this.#grant(req.key, this.#state(req.key), req);
  }

  /** `LockBackend.acquire` for a mutex: a grant at once, or, for a wait, when the key frees; null for a busy one-shot attempt. Rejects with `req.signal.reason` on abort. */
  acquire(req: AcquireRequest): Promise<MemoryLease | null> {
    req.signal.throwIfAborted();
    const answer = this.acquireNow(req);
    if (answer !== undefined) return Promise.resolve(answer);
    const state = this.#state(req.key);
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        const i = state.waiters.indexOf(waiter);
        if (i >= 0) state.waiters.splice(i, 1);
        this.#dropIfUnused(req.key, state);
        reject(req.signal.reason);
      };
      const waiter: Waiter = {
        req,
        grant: (lease) => {
          req.signal.removeEventListener('abort', onAbort);
          resolve(lease);
        },
      };
      state.waiters.push(waiter);
      req.signal.addEventListener('abort', onAbort, { once: true });
      if (state.holder && !state.holder.timer) this.#armExpiry(req.key, state.holder);
    });
  }

  /** `LockBackend.renew`: whether the lease was still this owner's (its expiry then moved `ttlMs` ahead). Never throws. */
  renew(lease: MemoryLease, ttlMs: number): boolean {
    if (lease.space === 'shared') return this.#renewClaim(lease, ttlMs);
    const state = this.#keys.get(lease.key);
    const holder = state?.holder;
    if (!holder || holder.owner !== lease.owner) return false;
    if (now() >= holder.expiresAt) {
      this.#vacate(lease.key, state);
      return false;
    }
    holder.expiresAt = now() + ttlMs;
    if (holder.timer) this.#armExpiry(lease.key, holder);
    return true;
  }

  /** `LockBackend.release`: frees the lease if it is still this owner's, and hands the key to the next waiter. Never throws. */
  release(lease: MemoryLease): void {
    if (lease.space === 'shared') {
      const state = this.#shared.get(lease.key);
      const claim = state?.claims.find((c) => c.req.owner === lease.owner && !c.grant);
      if (state && claim) this.#dropClaim(lease.key, state, claim);
      return;
    }
    const state = this.#keys.get(lease.key);
    if (state?.holder?.owner !== lease.owner) return;
    this.#vacate(lease.key, state);
  }

  /** See `LockBackend.raiseTokenFloor`; the table's one counter serves every key. */
  raiseTokenFloor(lease: MemoryLease, floor: bigint): boolean {
    this.#expireIfDue(lease.key);
    this.#expireShared(lease.key);
    const owner =
      lease.space === 'shared'
        ? this.#shared.get(lease.key)?.claims.find((c) => c.req.owner === lease.owner && !c.grant)?.req.owner
        : this.#keys.get(lease.key)?.holder?.owner;
    if (owner !== lease.owner) return false;
    if (floor > this.#lastToken) this.#lastToken = floor;
    return true;
  }

  /** See `LockBackend.tokenFloor`. */
  tokenFloor(raise = 0n): bigint {
    if (raise > this.#floor) this.#floor = raise;
    if (raise > this.#lastToken) this.#lastToken = raise;
    return this.#floor;
  }

  /** See `LockBackend.tokenCeiling`: the one counter is above every token and floor. */
  tokenCeiling(): bigint {
    return this.#lastToken;
  }

  /** Forget every holder at once, as a store that lost its data would. Waiters are then granted. */
  evictAll(): void {
    for (const [key, state] of [...this.#keys]) if (state.holder) this.#vacate(key, state);
    for (const [key, state] of [...this.#shared]) for (const c of [...state.claims]) if (!c.grant) this.#dropClaim(key, state, c);
  }

  /** `LockBackend.forceRelease`: frees the claim `owner` holds (not one it waits with), as its release would; whether there was one. */
  free(key: string, owner: string, space: KeySpace): boolean {
    if (space === 'shared') {
      this.#expireShared(key);
      const state = this.#shared.get(key);
      const claim = state?.claims.find((c) => c.req.owner === owner && !c.grant);
      if (state && claim) this.#dropClaim(key, state, claim);
      return claim !== undefined;
    }
    this.#expireIfDue(key);
    const state = this.#keys.get(key);
    if (!state || state.holder?.owner !== owner) return false;
    this.#vacate(key, state);
    return true;
  }

  /** Forget `owner`'s claim on the shared key `key`, as a store that lost it would. */
  forgetClaim(key: string, owner: string): void {
    const state = this.#shared.get(key);
    const claim = state?.claims.find((c) => c.req.owner === owner);
    if (state && claim) this.#dropClaim(key, state, claim);
  }

  /** The owners of a shared key's live claims, in arrival order (granted and waiting). */
  inspectShared(key: string): string[] {
    this.#expireShared(key);
    return this.#shared.get(key)?.claims.map((c) => c.req.owner) ?? [];
  }

  /** What the table holds for `key`: the holder's owner and each waiter's owner. */
  inspect(key: string): { holder: string | undefined; waiters: string[] } | undefined {
    this.#expireIfDue(key);
    const state = this.#keys.get(key);
    return state && inUse(state) ? { holder: state.holder?.owner, waiters: state.waiters.map((w) => w.req.owner) } : undefined;
  }

  /** `LockBackend.inspect`: the key's live holders and waiters (a waiter lives as long as its process: no ttl). */
  view(key: string, space: KeySpace): StoreView {
    const at = now();
    const left = (expiresAt: number) => (expiresAt === Infinity ? null : Math.max(0, expiresAt - at));
    if (space === 'shared') {
      this.#expireShared(key);
      const state = this.#shared.get(key);
      // Granted by the same rule, at once: the rule's holders are the granted claims.
      const claims = (state?.claims ?? []).map((c) => ({
        owner: c.req.owner,
        token: c.token ?? null,
        ttlLeftMs: left(c.expiresAt),
        mode: c.mode,
      }));
      return sharedView(claims, state?.limit, true);
    }
    this.#expireIfDue(key);
    const state = this.#keys.get(key);
    const holder = state?.holder;
    return {
      holders: holder ? [{ owner: holder.owner, token: holder.token, ttlLeftMs: left(holder.expiresAt) }] : [],
      waiters: (state?.waiters ?? []).map((w) => ({ owner: w.req.owner, token: null, ttlLeftMs: null })),
    };
  }

  /** Number of keys held or waited for (mutex and shared keys); freed entries kept for reuse do not count. O(keys). */
  get size(): number {
    let used = 0;
    for (const state of this.#keys.values()) if (inUse(state)) used++;
    return used + this.#shared.size;
  }

  /** Number of entries the table holds: the keys in use and up to KEPT_FREE (1 024) freed ones kept for reuse. */
  get retained(): number {
    return this.#keys.size + this.#shared.size;
  }

  #renewClaim(lease: MemoryLease, ttlMs: number): boolean {
    this.#expireShared(lease.key);
    const claim = this.#shared.get(lease.key)?.claims.find((c) => c.req.owner === lease.owner && !c.grant);
    if (!claim) return false;
    claim.expiresAt = now() + ttlMs;
    return true;
  }

  #grantClaim(key: string, state: SharedState, claim: Claim): MemoryLease {
    const { req } = claim;
    if (req.minToken !== undefined && req.minToken > this.#lastToken + 1n) this.#lastToken = req.minToken - 1n;
    const token = ++this.#lastToken;
    const acquiredAt = now();
    claim.expiresAt = acquiredAt + req.ttlMs;
    claim.grant = undefined;
    claim.token = token;
    if (state.claims.some((c) => c.grant)) this.#armClaimExpiry(key, claim);
    return { space: 'shared', key, owner: req.owner, token, acquiredAt };
  }

  /** Remove a claim (released, expired, aborted, or a failed try) and grant whoever may go now. */
  #dropClaim(key: string, state: SharedState, claim: Claim): void {
    const i = state.claims.indexOf(claim);
    if (i < 0) return;
    claim.timer?.cancel();
    state.claims.splice(i, 1);
    state.claims.forEach((c, index) => {
      if (c.grant && grantable(state.claims, index, state.limit)) {
        const grant = c.grant;
        grant(this.#grantClaim(key, state, c));
      }
    });
    if (state.claims.length === 0 && this.#shared.get(key) === state) this.#shared.delete(key);
  }

  #expireShared(key: string): void {
    const state = this.#shared.get(key);
    if (!state) return;
    const at = now();
    for (const c of state.claims.filter((c) => at >= c.expiresAt)) this.#dropClaim(key, state, c);
  }

  #armClaimExpiry(key: string, claim: Claim): void {
    armExpiry(claim, () => {
      const state = this.#shared.get(key);
      if (!state?.claims.includes(claim)) return;
      if (now() >= claim.expiresAt) this.#dropClaim(key, state, claim);
      else if (state.claims.some((c) => c.grant)) this.#armClaimExpiry(key, claim);
    });
  }

  /** Leases end lazily: whoever looks at a key first after its expiry frees it. */
  #expireIfDue(key: string, state = this.#keys.get(key)): void {
    if (state?.holder && now() >= state.holder.expiresAt) this.#vacate(key, state);
  }

  #state(key: string): KeyState {
    return this.#keys.get(key) ?? this.#newState(key);
  }

  #newState(key: string): KeyState {
    const state: KeyState = { holder: undefined, waiters: [], kept: false };
    this.#keys.set(key, state);
    return state;
  }

  #grant(key: string, state: KeyState, req: AcquireRequest): MemoryLease {
    if (req.minToken !== undefined && req.minToken > this.#lastToken + 1n) this.#lastToken = req.minToken - 1n;
    const token = ++this.#lastToken;
    const acquiredAt = now();
    const holder: Holder = { owner: req.owner, token, expiresAt: acquiredAt + req.ttlMs, timer: undefined };
    state.holder = holder;
    if (state.waiters.length > 0) this.#armExpiry(key, holder);
    return { space: 'mutex', key, owner: req.owner, token, acquiredAt };
  }

  /** Hand the key to the next waiter when the holder's lease runs out. */
  #armExpiry(key: string, holder: Holder): void {
    armExpiry(holder, () => {
      const state = this.#keys.get(key);
      if (state?.holder !== holder) return;
      if (now() >= holder.expiresAt) this.#vacate(key, state);
      else this.#armExpiry(key, holder);
    });
  }

  #vacate(key: string, state: KeyState): void {
    state.holder?.timer?.cancel();
    state.holder = undefined;
    const next = state.waiters.shift();
    if (next) next.grant(this.#grant(key, state, next.req));
    else this.#dropIfUnused(key, state);
  }

  /**
   * A freed entry stays for reuse: a key taken again soon (a job's lock in a loop) then costs no
   * table insert and delete per cycle, a sixth of an in-process lock cycle. An entry is listed once,
   * when first freed, and stays listed while it is reused; once KEPT_FREE are listed, each new one
   * delists the one listed longest ago, which goes from the table unless it is in use (then it is
   * listed again when next freed).
   */
  #dropIfUnused(key: string, state: KeyState): void {
    if (inUse(state) || state.kept || this.#keys.get(key) !== state) return;
    state.kept = true;
    this.#kept.add(key);
    if (this.#kept.size <= KEPT_FREE) return;
    const oldest: string = this.#kept.values().next().value!;
    this.#kept.delete(oldest);
    const old = this.#keys.get(oldest)!;
    old.kept = false;
    if (!inUse(old)) this.#keys.delete(oldest);
  }
}

function inUse(state: KeyState): boolean {
  return state.holder !== undefined || state.waiters.length > 0;
}

/** The table every `memoryBackend()` without an explicit `store` shares: one per process. */
const processStore = new MemoryLockStore();

/** Options of `memoryBackend`; unknown names are `InvalidArgumentError`. */
export interface MemoryBackendOptions {
  /** The lock table to use. Default: the process-wide one, so all lockers in a process exclude each other. */
  store?: MemoryLockStore;
}

const MEMORY_RULES = {
  store: instance((v): v is MemoryLockStore => v instanceof MemoryLockStore, 'a MemoryLockStore'),
} satisfies Rules<MemoryBackendOptions>;

/** In-process backend: FIFO, fenced, push wake-up, leases expire on a timer. Never fails on I/O. */
export class MemoryBackend implements LockBackend<MemoryLease> {
  readonly name = 'memory';
  readonly capabilities: Capabilities = {
    fairness: 'fifo',
    lease: 'ttl',
    wake: 'push',
    crossProcess: false,
    minToken: true,
    semaphore: true,
    readWrite: true,
  };
  readonly store: MemoryLockStore;
  #closed = false;

  /** @throws InvalidArgumentError for bad options. */
  constructor(options?: MemoryBackendOptions) {
    this.store = readOptions(options, MEMORY_RULES, 'memoryBackend').store ?? processStore;
  }

  // Not async: the store answers with a settled promise, and an async wrapper would add two more
  // turns of the microtask queue to every in-process lock.
  acquire(req: AcquireRequest): Promise<MemoryLease | null> {
    try {
      if (this.#closed) throw new LockerClosedError('the memory backend is closed');
      return keySpace(req) === 'mutex' ? this.store.acquire(req) : this.store.acquireShared(req);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  async renew(lease: MemoryLease, ttlMs: number): Promise<boolean> {
    return this.store.renew(lease, ttlMs);
  }

  async inspect(key: string, space: KeySpace): Promise<StoreView> {
    return this.store.view(key, space);
  }

  async forceRelease(key: string, owner: string, space: KeySpace): Promise<boolean> {
    return this.store.free(key, owner, space);
  }

  acquireNow(req: AcquireRequest): MemoryLease | null | undefined {
    if (this.#closed) throw new LockerClosedError('the memory backend is closed');
    return this.store.acquireNow(req);
  }

  release(lease: MemoryLease): Promise<void> {
    this.releaseNow(lease);
    return DONE;
  }

  releaseNow(lease: MemoryLease): void {
    this.store.release(lease);
  }

  async raiseTokenFloor(lease: MemoryLease, floor: bigint): Promise<boolean> {
    return this.store.raiseTokenFloor(lease, floor);
  }

  async tokenFloor(raise?: bigint): Promise<bigint> {
    return this.store.tokenFloor(raise);
  }

  async tokenCeiling(): Promise<bigint> {
    return this.store.tokenCeiling();
  }

  async close(): Promise<void> {
    this.#closed = true;
  }
}

/** A memory backend; see `MemoryBackend`. @throws InvalidArgumentError for bad options. */
export function memoryBackend(options?: MemoryBackendOptions): MemoryBackend {
  return new MemoryBackend(options);
}
