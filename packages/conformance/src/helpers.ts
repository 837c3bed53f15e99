// Helpers the behaviour groups and the backends' own tests share.
import { createLocker, type Inspection, type Lock, type LockBackend, type Locker, type LockerOptions } from '@deadbolt/core';
import { sleep } from '@deadbolt/core/backend';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { inspect, isDeepStrictEqual } from 'node:util';
import { afterEach, expect } from './harness.js';
import { FaultProxy } from './fault-proxy.js';
import { storeAddress, viaUrl } from './test-matrix.js';

/**
 * `value` where the types forbid it: what JavaScript, or a cast, can hand the API. The API must
 * refuse it at run time, so a behaviour feeds it on purpose. Throws nothing.
 */
export function untyped<T>(value: unknown): T {
  return value as T;
}

/**
 * For a backend's own tests: returns `track(locker)`, and closes every tracked locker after each
 * test of the calling file.
 */
export function closeLockersAfterEach(): <L extends Locker>(locker: L) => L {
  const open: Locker[] = [];
  afterEach(async () => {
    await Promise.allSettled(open.splice(0).map((l) => l.close()));
  });
  return (locker) => (open.push(locker), locker);
}

/**
 * How late the event loop runs a timer of `ms` armed now, once it has run (0 until then). A loaded
 * machine delays core's timers as much: a bound that includes one (an aborted wait gives the
 * backend up to 50 ms to clean up) allows for it, so the bound keeps measuring the backend, not the
 * machine's load.
 */
export function timerLateness(ms: number): () => number {
  const armed = performance.now();
  let late = 0;
  setTimeout(() => (late = Math.max(0, performance.now() - armed - ms)), ms);
  return () => late;
}

/**
 * How long this process could not run (ms) from now until the returned function is called: on a
 * loaded machine a process goes unscheduled, or collects garbage, for tens of ms at a time, at any
 * moment of a measured window, not only while a timer runs (which `timerLateness` sees). Many short
 * stalls add up (an abort answered in 546 ms was seen on a loaded machine, past a bound of 320 ms
 * that had its longest single stall added), so this is their sum: each 10 ms sample's lateness past its 10 ms, added up. A bound of
 * a few tens of ms that adds it measures the code, not the machine's load.
 */
export function stallsFromNow(): () => number {
  const loop = watchLoop();
  return () => {
    const { longestMs, totalMs } = loop();
    return Math.max(longestMs, totalMs);
  };
}

/**
 * The longest single stall of this process (ms) from now until the returned function is called. A
 * stall past what a renewal cadence leaves (a third of a ttl) lets a lease lapse legitimately: a
 * process that did not run did not renew.
 */
export function longestStallFromNow(): () => number {
  const loop = watchLoop();
  return () => loop().longestMs;
}

/** Samples the event loop every 10 ms; the returned function stops and reports the longest and summed lateness. */
function watchLoop(): () => { longestMs: number; totalMs: number } {
  const resolutionMs = 10;
  const delays = monitorEventLoopDelay({ resolution: resolutionMs });
  delays.enable();
  return () => {
    delays.disable();
    if (delays.count === 0) return { longestMs: 0, totalMs: 0 };
    const totalMs = Math.max(0, (delays.count * delays.mean) / 1e6 - delays.count * resolutionMs);
    return { longestMs: Math.max(0, delays.max / 1e6 - resolutionMs), totalMs };
  };
}

/**
 * Resolves once `read()` deep-equals `expected`; rejects with an Error showing both if it still does
 * not after `ms` (which fails the calling test under any runner). For what a backend removes just behind a rejection: core waits up to 50 ms for an aborted
 * wait's cleanup and then keeps the caller's deadline, so on a loaded store the cleanup's answer
 * can come a little after the caller heard the abort.
 */
export async function expectSoon<T>(read: () => Promise<T>, expected: T, ms = 1000): Promise<void> {
  const until = performance.now() + ms;
  let seen = await read();
  while (!isDeepStrictEqual(seen, expected) && performance.now() < until) {
    await sleep(10);
    seen = await read();
  }
  if (!isDeepStrictEqual(seen, expected))
    throw new Error(`expected ${inspect(expected)} within ${ms} ms; the last read gave ${inspect(seen)}`);
}

/** Resolves once `lock.signal` aborts (at once if it already has); rejects if it has not within `ms`. */
export async function abortedWithin(lock: Pick<Lock, 'signal'>, ms: number): Promise<void> {
  if (lock.signal.aborted) return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`lock.signal did not abort within ${ms} ms`)), ms);
    lock.signal.addEventListener(
      'abort',
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}

/**
 * For a backend whose waiter blocks in the store on a connection of its own (session mode):
 * `waiter`'s backend has a pool of `poolSize` connections, and that many of its waits queue for
 * `key`, which `holder` holds, so the pool has no connection to spare; then every caller gives up.
 * Each aborted wait must be ended in the server (the cancel goes from another connection of the
 * same pool) within 1.5 s: `serverWaits` counts the waits of `waiter`'s backend the server still
 * has. Fails the calling test otherwise.
 */
export async function expectAbortsPastFullPool(
  holder: Locker,
  waiter: Locker,
  poolSize: number,
  key: string,
  serverWaits: () => Promise<number>,
): Promise<void> {
  const held = await holder.lock(key);
  const controller = new AbortController();
  const reason = new Error('the caller gave up');
  const waits = Array.from({ length: poolSize }, () =>
    waiter.lock(key, { signal: controller.signal, timeoutMs: 20_000 }).catch((e: unknown) => e),
  );
  await expectSoon(async () => (await serverWaits()) >= poolSize - 1, true, 5000);
  controller.abort(reason);
  for (const outcome of await Promise.all(waits)) expect(outcome).toBe(reason);
  await expectSoon(serverWaits, 0, 1500);
  await held.release();
}

/**
 * A backend of the store at `url` in the mode whose waiters block in the store on a connection of
 * their own (session mode), with that connect timeout when one is given.
 */
export type SessionBackendAt = (url: string, connectTimeoutMs?: number) => LockBackend;

/**
 * Runs `check` with a locker on the store at `url` (`holder`) and one whose store is reached through
 * a fault proxy of its own, with a connect timeout of 500 ms (`waiter`, with `waiterOptions`); both
 * lockers and the proxy are closed after.
 */
async function holderAndProxiedWaiter(
  url: string,
  backendAt: SessionBackendAt,
  waiterOptions: LockerOptions,
  check: (holder: Locker, waiter: Locker, proxy: FaultProxy) => Promise<void>,
): Promise<void> {
  const proxy = await FaultProxy.start(storeAddress(url));
  const holder = createLocker(backendAt(url), { ttlMs: 30_000 });
  const waiter = createLocker(backendAt(viaUrl(url, proxy.address), 500), { ttlMs: 30_000, ...waiterOptions });
  try {
    await check(holder, waiter, proxy);
  } finally {
    await Promise.allSettled([holder.close(), waiter.close()]);
    await proxy.close();
  }
}

/**
 * For a backend whose waiter blocks in the store on a connection of its own: 24 waits of a waiter
 * (its store reached through a proxy, with a connect timeout of 500 ms and no grace of the
 * locker's own) queue for `key`, which another locker holds, while every other connection the
 * proxy accepts starts its session 1.5 s late, past the connect timeout: a server too busy to start
 * every session in time, not one that is down. The holder releases after 3 s, longer than a
 * backend's grace for failed connects. Every wait must get its turn. Fails the calling test otherwise.
 */
export function expectWaitsThroughBusyServer(url: string, backendAt: SessionBackendAt, key: string): Promise<void> {
  return holderAndProxiedWaiter(url, backendAt, { unavailableGraceMs: 0 }, async (holder, waiter, proxy) => {
    const held = await holder.lock(key);
    proxy.slowHandshake(1500, 2);
    const waits = Promise.allSettled(Array.from({ length: 24 }, async () => (await waiter.lock(key, { timeoutMs: 20_000 })).release()));
    await sleep(3000);
    await held.release();
    const failed = (await waits).flatMap((w) => (w.status === 'rejected' ? [String(w.reason)] : []));
    expect(failed, `waits that failed, the first: ${failed[0]}`).toHaveLength(0);
  });
}

/**
 * For a backend whose waiter blocks in the store on a connection of its own: a waiter (its store
 * reached through a proxy, with a connect timeout of 500 ms) starts waiting for `key`, which
 * another locker holds, while the proxy accepts connections and forwards nothing, so a connect gets
 * no handshake and times out. The proxy heals 700 ms later; the wait must carry on and be granted,
 * with a larger token, once the holder releases. Fails the calling test otherwise.
 */
export function expectWaitThroughSlowConnect(url: string, backendAt: SessionBackendAt, key: string): Promise<void> {
  return holderAndProxiedWaiter(url, backendAt, {}, async (holder, waiter, proxy) => {
    const held = await holder.lock(key);
    proxy.blackhole();
    const waiting = waiter.lock(key, { timeoutMs: 10_000 });
    waiting.catch(() => undefined); // awaited below; a failure must not count as unhandled meanwhile
    await sleep(700);
    proxy.heal();
    await sleep(500);
    await held.release();
    const lock = await waiting;
    expect(lock.token).toBeGreaterThan(held.token);
    await lock.release();
  });
}

/** `wait`, its rejection handled: a test that fails before it settles leaves no unhandled rejection (close() rejects it). */
export function pending<T>(wait: Promise<T>): Promise<T> {
  wait.catch(() => undefined);
  return wait;
}

/**
 * Resolves once `read()` shows `n` waiters, or after 5 s with what it shows; at once where the
 * store keeps no queue (`waiters: null`), after a pause for the waits to start.
 */
export async function waitersSeen(read: () => Promise<Inspection>, n: number): Promise<Inspection> {
  const until = performance.now() + 5000;
  for (;;) {
    const seen = await read();
    if (seen.waiters === null) {
      await sleep(300);
      return read();
    }
    if (seen.waiters.length >= n || performance.now() > until) return seen;
    await sleep(20);
  }
}
