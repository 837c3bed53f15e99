/**
 * A lock holder in its own Node process, driven by the suite over IPC so it can be `kill -9`ed and
 * `SIGSTOP`ped like a real crashed or paused service. It builds its backend from a module the
 * backend's test names (`ChildBackendConfig`) and uses only the public Locker API.
 */
import { createLocker, type Fence, type Leadership, type Lock, type Locker, type LockerOptions, type LockOptions } from '@deadbolt/core';
import { sharedHoldMs, takeShared, type SharedFamily } from './shared-family.js';
import { backendFromConfig, fenceFromConfig } from './migration-child.js';
import type { ChildBackendConfig } from './children.js';
import { ipcChannel, Rpc } from './rpc.js';

let locker: Locker | undefined;
/** What `init` was given, for the locker `elect` makes with the fence. */
let made: { config: ChildBackendConfig; lockerOptions: LockerOptions } | undefined;
/** That locker: its leader's value is published in the fence `openFence` opened. */
let electing: Locker | undefined;
const handles = new Map<number, Lock>();
const terms = new Map<number, Leadership>();
let nextHandle = 1;
let working = false;
let fence: Fence | undefined;

function need(): Locker {
  if (!locker) throw new Error('child not initialised');
  return locker;
}

function handle(id: number): Lock {
  const lock = handles.get(id);
  if (!lock) throw new Error(`no lock handle ${id}`);
  return lock;
}

/** 'ok' when `done` fulfils, else its error's code (STALE_TOKEN, LOCK_LOST, …): a refusal the suite reads as an answer. */
const okOrCode = (done: Promise<unknown>): Promise<string> =>
  done.then(
    () => 'ok',
    (error: unknown) => String((error as { code?: unknown }).code ?? error),
  );

/** Tells the suite ('lost') when the hold `id`, with `token`, ends by `signal`. */
function reportLoss(id: number, signal: AbortSignal, token: bigint): void {
  signal.addEventListener('abort', () => rpc.emit('lost', { id, token }), { once: true });
}

const rpc = new Rpc(ipcChannel(process), {
  async init(module: string, exportName: string, options: unknown, lockerOptions: LockerOptions) {
    made = { config: { module, export: exportName, options }, lockerOptions };
    locker = createLocker(await backendFromConfig(made.config), lockerOptions);
  },

  /** A term of election `name`, its value published in the fence `openFence` opened; its loss is emitted as 'lost'. */
  async elect(name: string, value: string) {
    if (!fence || !made) throw new Error('elect needs init and openFence first');
    electing ??= createLocker(await backendFromConfig(made.config), { ...made.lockerOptions, fence });
    const term = await electing.elect(name, { value });
    const id = nextHandle++;
    terms.set(id, term);
    reportLoss(id, term.signal, term.token);
    return { id, token: term.token, term: term.term };
  },

  /** Publishes `value` in term `id`: 'ok', or the error's code (LOCK_LOST once the term ended). */
  async proclaim(id: number, value: string) {
    const term = terms.get(id);
    if (!term) throw new Error(`no term ${id}`);
    return okOrCode(term.proclaim(value));
  },

  async lock(key: string, options: LockOptions = {}) {
    const lock = await need().lock(key, options);
    const id = nextHandle++;
    handles.set(id, lock);
    reportLoss(id, lock.signal, lock.token);
    return { id, token: lock.token, owner: lock.owner };
  },

  /** A semaphore permit (`family` = { limit }) or a read or write lock; same reply as `lock`. */
  async acquireShared(key: string, family: SharedFamily, options: LockOptions = {}) {
    const lock = await takeShared(need(), key, family, options);
    const id = nextHandle++;
    handles.set(id, lock);
    reportLoss(id, lock.signal, lock.token);
    return { id, token: lock.token, owner: lock.owner };
  },

  /** Shared exclusion workload: `count` times take `family`, hold `holdMs`, release; returns [start, end] of each hold. */
  async sharedWork(key: string, family: SharedFamily, count: number, holdMs: number) {
    const holds: [number, number][] = [];
    for (let i = 0; i < count; i++) {
      const lock = await takeShared(need(), key, family, {});
      const start = Number(process.hrtime.bigint());
      await new Promise((r) => setTimeout(r, sharedHoldMs(holdMs)));
      holds.push([start, Number(process.hrtime.bigint())]);
      await lock.release();
    }
    return holds;
  },

  /** Multi-key workload: `count` times lockAll(keys) (in the order given), hold 0–`holdMs` ms, release; returns [start, end] of each hold. */
  async lockAllWork(keys: string[], count: number, holdMs: number) {
    const holds: [number, number][] = [];
    for (let i = 0; i < count; i++) {
      const all = await need().lockAll(keys, { timeoutMs: 60_000 });
      const start = Number(process.hrtime.bigint());
      await new Promise((r) => setTimeout(r, holdMs * Math.random()));
      holds.push([start, Number(process.hrtime.bigint())]);
      await all.release();
    }
    return holds;
  },

  async release(id: number) {
    await handle(id).release();
    handles.delete(id);
  },

  /** Exclusion workload: `count` times lock, read the parent's register, sleep 0–2 ms, write +1. */
  async exclusion(key: string, count: number, ttlMs: number) {
    const holds: [number, number][] = [];
    for (let i = 0; i < count; i++) {
      const lock = await need().lock(key, { ttlMs });
      const start = Number(process.hrtime.bigint());
      const value = await rpc.call<number>('read');
      await new Promise((r) => setTimeout(r, Math.random() * 2));
      await rpc.call('write', value + 1, lock.token);
      holds.push([start, Number(process.hrtime.bigint())]);
      await lock.release();
    }
    return holds;
  },

  /**
   * Rolling-migration workload: until `stopWork`, lock, write to the parent's fenced register,
   * hold `holdMs`, write again, release. Returns every hold: [start, end] (monotonic ns, comparable
   * across processes on one machine) and its token.
   */
  async work(key: string, holdMs: number) {
    working = true;
    const holds: [number, number, bigint][] = [];
    while (working) {
      const lock = await need().lock(key);
      const start = Number(process.hrtime.bigint());
      await rpc.call('fencedWrite', lock.token);
      await new Promise((r) => setTimeout(r, holdMs));
      await rpc.call('fencedWrite', lock.token);
      holds.push([start, Number(process.hrtime.bigint()), lock.token]);
      await lock.release();
    }
    return holds;
  },

  stopWork() {
    working = false;
  },

  /** Fenced writer: every `everyMs`, write to the parent's register unless the lock was lost. */
  fencedWrites(id: number, everyMs: number) {
    const lock = handle(id);
    const tick = async () => {
      if (lock.signal.aborted) return rpc.emit('writer-stopped', { id });
      await rpc.call('fencedWrite', lock.token, process.hrtime.bigint());
      setTimeout(tick, everyMs);
    };
    void tick();
  },

  /** Opens the store's fence (`ConformanceOptions.fence`) for `fenceWrite`. */
  async openFence(module: string, exportName: string, options: unknown) {
    fence = await fenceFromConfig({ module, export: exportName, options });
  },

  /** One write through the store's fence: 'ok', or the error's code (STALE_TOKEN when refused). */
  async fenceWrite(resource: string, token: bigint, value: string) {
    if (!fence) throw new Error('no fence opened');
    return okOrCode(fence.write(resource, token, value));
  },

  /**
   * Without `init`: a backend (and the store's fence, given its config) made and never used, and
   * one that `createLocker` refuses (ttlMs 0); then the IPC channel closed, after which the process
   * must exit on its own. Resolves the refusal's error name.
   */
  async unusedAndDetach(backend: ChildBackendConfig, fenceConfig?: ChildBackendConfig) {
    await backendFromConfig(backend);
    if (fenceConfig) await fenceFromConfig(fenceConfig);
    const refused = await backendFromConfig(backend);
    let name = 'accepted';
    try {
      createLocker(refused, { ttlMs: 0 });
    } catch (error) {
      name = (error as Error).name;
    }
    setImmediate(() => process.disconnect());
    return name;
  },

  /** One `runOnce` of a job that returns at once: its window's lock stays behind, left to the store (or to a timer on a session store). */
  async runOnce(name: string, lockAtLeastForMs: number) {
    return (await need().runOnce(name, async () => 'done', { lockAtMostForMs: lockAtLeastForMs, lockAtLeastForMs })).ran;
  },

  /** Close the locker and the IPC channel; the process must then exit on its own. */
  async closeAndDetach() {
    await need().close();
    setImmediate(() => process.disconnect());
  },
});

rpc.emit('ready');
