import type { AcquireRequest, Capabilities, Lease, LockBackend } from './backend.js';
import { LockerClosedError } from './errors.js';

interface Holder {
  readonly owner: string;
  readonly token: bigint;
  /** performance.now() at which the lease ends. */
  expiresAt: number;
  /** Armed only while someone waits: an uncontended lock costs no timer. */
  timer: NodeJS.Timeout | undefined;
}

interface Waiter {
  readonly req: AcquireRequest;
  readonly grant: (lease: Lease) => void;
}

interface KeyState {
  holder: Holder | undefined;
  readonly waiters: Waiter[];
}

/**
 * The process's lock table: per key a holder and a FIFO queue of waiters. A key's entry exists
 * only while it is held or waited for (reference-counted, seed 002), so the table never grows with
 * the number of keys ever used. Tokens come from one counter for the whole table, which makes them
 * strictly increasing per key even though a key's entry is dropped between uses.
 */
export class MemoryLockStore {
  readonly #keys = new Map<string, KeyState>();
  #lastToken = 0n;

  acquire(req: AcquireRequest): Promise<Lease | null> {
    req.signal.throwIfAborted();
    this.#expireIfDue(req.key);
    const state = this.#state(req.key);
    if (!state.holder && state.waiters.length === 0) return Promise.resolve(this.#grant(req.key, state, req));
    if (!req.wait) {
      this.#dropIfUnused(req.key, state);
      return Promise.resolve(null);
    }
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

  renew(lease: Lease, ttlMs: number): boolean {
    const state = this.#keys.get(lease.key);
    const holder = state?.holder;
    if (!holder || holder.owner !== lease.owner) return false;
    if (performance.now() >= holder.expiresAt) {
      this.#vacate(lease.key, state);
      return false;
    }
    holder.expiresAt = performance.now() + ttlMs;
    if (holder.timer) this.#armExpiry(lease.key, holder);
    return true;
  }

  release(lease: Lease): void {
    const state = this.#keys.get(lease.key);
    if (state?.holder?.owner !== lease.owner) return;
    this.#vacate(lease.key, state);
  }

  /** See `LockBackend.raiseTokenFloor`; the table's one counter serves every key. */
  raiseTokenFloor(lease: Lease, floor: bigint): boolean {
    this.#expireIfDue(lease.key);
    const holder = this.#keys.get(lease.key)?.holder;
    if (holder?.owner !== lease.owner) return false;
    if (floor > this.#lastToken) this.#lastToken = floor;
    return true;
  }

  /** Forget every holder at once, as a store that lost its data would. Waiters are then granted. */
  evictAll(): void {
    for (const [key, state] of [...this.#keys]) if (state.holder) this.#vacate(key, state);
  }

  /** What the table holds for `key`: the holder's owner and each waiter's owner. */
  inspect(key: string): { holder: string | undefined; waiters: string[] } | undefined {
    this.#expireIfDue(key);
    const state = this.#keys.get(key);
    return state && { holder: state.holder?.owner, waiters: state.waiters.map((w) => w.req.owner) };
  }

  /** Number of keys with an entry (held or waited for). */
  get size(): number {
    return this.#keys.size;
  }

  /** Leases end lazily: whoever looks at a key first after its expiry frees it. */
  #expireIfDue(key: string): void {
    const state = this.#keys.get(key);
    if (state?.holder && performance.now() >= state.holder.expiresAt) this.#vacate(key, state);
  }

  #state(key: string): KeyState {
    let state = this.#keys.get(key);
    if (!state) this.#keys.set(key, (state = { holder: undefined, waiters: [] }));
    return state;
  }

  #grant(key: string, state: KeyState, req: AcquireRequest): Lease {
    if (req.minToken !== undefined && req.minToken > this.#lastToken + 1n) this.#lastToken = req.minToken - 1n;
    const token = ++this.#lastToken;
    const acquiredAt = performance.now();
    const holder: Holder = { owner: req.owner, token, expiresAt: acquiredAt + req.ttlMs, timer: undefined };
    state.holder = holder;
    if (state.waiters.length > 0) this.#armExpiry(key, holder);
    return { key, owner: req.owner, token, acquiredAt };
  }

  /** Hand the key to the next waiter when the holder's lease runs out. */
  #armExpiry(key: string, holder: Holder): void {
    clearTimeout(holder.timer);
    holder.timer = setTimeout(() => {
      holder.timer = undefined;
      const state = this.#keys.get(key);
      if (state?.holder !== holder) return;
      if (performance.now() >= holder.expiresAt) this.#vacate(key, state);
      else this.#armExpiry(key, holder);
    }, Math.max(0, holder.expiresAt - performance.now()) + 1);
    holder.timer.unref();
  }

  #vacate(key: string, state: KeyState): void {
    if (state.holder) clearTimeout(state.holder.timer);
    state.holder = undefined;
    const next = state.waiters.shift();
    if (next) next.grant(this.#grant(key, state, next.req));
    else this.#dropIfUnused(key, state);
  }

  #dropIfUnused(key: string, state: KeyState): void {
    if (!state.holder && state.waiters.length === 0 && this.#keys.get(key) === state) this.#keys.delete(key);
  }
}

/** The table every `memoryBackend()` without an explicit `store` shares: one per process. */
const processStore = new MemoryLockStore();

export interface MemoryBackendOptions {
  /** The lock table to use. Default: the process-wide one, so all lockers in a process exclude each other. */
  store?: MemoryLockStore;
}

/** In-process backend: FIFO, fenced, push wake-up, leases expire on a timer. Never fails on I/O. */
export class MemoryBackend implements LockBackend {
  readonly name = 'memory';
  readonly capabilities: Capabilities = {
    fencing: 'strict',
    fairness: 'fifo',
    lease: 'ttl',
    wake: 'push',
    minTtlMs: 1,
    ttlGranularityMs: 1,
    crossProcess: false,
    minToken: true,
  };
  readonly store: MemoryLockStore;
  #closed = false;

  constructor(options: MemoryBackendOptions = {}) {
    this.store = options.store ?? processStore;
  }

  async acquire(req: AcquireRequest): Promise<Lease | null> {
    if (this.#closed) throw new LockerClosedError('the memory backend is closed');
    return this.store.acquire(req);
  }

  async renew(lease: Lease, ttlMs: number): Promise<boolean> {
    return this.store.renew(lease, ttlMs);
  }

  async release(lease: Lease): Promise<void> {
    this.store.release(lease);
  }

  async raiseTokenFloor(lease: Lease, floor: bigint): Promise<boolean> {
    return this.store.raiseTokenFloor(lease, floor);
  }

  async close(): Promise<void> {
    this.#closed = true;
  }
}

/** A memory backend; see `MemoryBackend`. */
export function memoryBackend(options?: MemoryBackendOptions): MemoryBackend {
  return new MemoryBackend(options);
}
