/**
 * Scenario 12: held locks per process. One locker takes N locks (N = 10, 100, 1 000, 10 000, and
 * 100 000 with --full), holds them through three renewal intervals, and gives them back: how fast
 * it took them, what renewing them costs per second (the locker's renew calls, the server's own
 * request counter, this process's CPU), the heap each held lock takes and what stays after the
 * release. Renewal is one round trip per held lock per interval on every store today, so the
 * curve says where a process's locks outgrow its store.
 */
import { createLocker, type Lock, type Locker } from '@deadbolt/core';
import { sleep } from '@deadbolt/core/backend';
import { observeBackend } from '@deadbolt/core/testing';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { StoreProbe } from './stores.js';
import type { Subject } from './subjects.js';

/** One point of a store's curve. */
export interface HeldPoint {
  subject: string;
  held: number;
  /** Locks taken per second while taking them (64 at a time). */
  acquiredPerSecond: number;
  /** The locker's renew calls per second over the hold. */
  renewalsPerSecond: number;
  /** The server's requests per second over the hold (its own counter); undefined where it keeps none. */
  storeRequestsPerSecond?: number;
  /** This process's CPU per second of the hold, in ms (for memory it includes the store). */
  clientCpuMsPerSecond: number;
  /** Heap per held lock, bytes: after a full GC, held against before taking them. */
  heapBytesPerLock: number;
  /** Heap per lock left after every lock was released, bytes (after a full GC). */
  retainedBytesPerLock: number;
  /** Locks whose signal aborted while held: renewals that could not keep up. */
  lostWhileHeld: number;
  /** Whether the curve stopped here: taking the locks took longer than the step's limit. */
  cut?: string;
  /** The locker's close failed after this point (its error): the point stands, the failure is said. */
  closeFailed?: string;
}

/** The ttl of every held lock: 6 s (ZooKeeper takes no less than 4 s; Cassandra counts whole seconds): renewed every 2 s. */
export const SCALE_TTL_MS = 6000;
/** How long the locks are held once taken: three renewal intervals. */
const HOLD_MS = 3 * (SCALE_TTL_MS / 3);
/** Taking one count's locks may last this long; a store slower than that ends its curve there. */
const TAKE_LIMIT_MS = 60_000;
const AT_ONCE = 64;

/** A full GC (the flag set at run time, so `pnpm bench` needs no node option). */
const gc: () => void = (() => {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
})();

const heapAfterGc = () => {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};

/** `fn(i)` for i in [0, count), at most AT_ONCE at a time; stops starting new ones after `deadline` (performance.now()). */
async function pool<T>(count: number, fn: (i: number) => Promise<T>, deadline = Infinity): Promise<T[]> {
  const out: T[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(AT_ONCE, count) }, async () => {
      while (next < count && performance.now() < deadline) out.push(await fn(next++));
    }),
  );
  return out;
}

/** Scenario 12 for one deadbolt subject: its curve over `counts` held locks, stopped early where a store cannot keep up. */
export async function heldCurve(subject: Subject, counts: readonly number[], probe: StoreProbe): Promise<HeldPoint[]> {
  const points: HeldPoint[] = [];
  for (const held of counts) {
    let renewals = 0;
    const backend = observeBackend(subject.backend!(), (method) => {
      if (method === 'renew') renewals++;
    });
    const locker: Locker = createLocker(backend, { ttlMs: SCALE_TTL_MS });
    const prefix = `bench:held:${process.pid}:${held}:`;
    try {
      const heapBefore = heapAfterGc();
      const t0 = performance.now();
      const locks: Lock[] = await pool(held, (i) => locker.lock(prefix + i), t0 + TAKE_LIMIT_MS);
      const takeSeconds = (performance.now() - t0) / 1000;
      if (locks.length < held) {
        await pool(locks.length, (i) => locks[i]!.release());
        points.push({
          ...empty(subject.name, held),
          acquiredPerSecond: locks.length / takeSeconds,
          cut: `took ${locks.length} in ${TAKE_LIMIT_MS / 1000} s`,
        });
        break;
      }
      const heapHeld = heapAfterGc();
      const [requestsBefore, renewalsBefore, cpuBefore, holdStart] = [
        await probe.requests(),
        renewals,
        process.cpuUsage(),
        performance.now(),
      ];
      await sleep(HOLD_MS);
      const seconds = (performance.now() - holdStart) / 1000;
      const requestsAfter = await probe.requests();
      const cpu = process.cpuUsage(cpuBefore);
      const renewed = renewals - renewalsBefore;
      const lostWhileHeld = locks.filter((lock) => lock.signal.aborted).length;
      await pool(held, (i) => locks[i]!.release().catch(() => undefined));
      locks.length = 0;
      const heapAfter = heapAfterGc();
      points.push({
        subject: subject.name,
        held,
        acquiredPerSecond: held / takeSeconds,
        renewalsPerSecond: renewed / seconds,
        ...(requestsBefore === undefined || requestsAfter === undefined
          ? {}
          : { storeRequestsPerSecond: (requestsAfter - requestsBefore) / seconds }),
        clientCpuMsPerSecond: (cpu.user + cpu.system) / 1000 / seconds,
        heapBytesPerLock: (heapHeld - heapBefore) / held,
        retainedBytesPerLock: (heapAfter - heapBefore) / held,
        lostWhileHeld,
      });
    } finally {
      const failed = await locker.close().then(
        () => undefined,
        (error: unknown) => (error instanceof Error ? error.message : String(error)),
      );
      const point = points.at(-1);
      if (failed !== undefined && point?.held === held) point.closeFailed = failed;
      else if (failed !== undefined) throw new Error(`closing the locker of ${held} locks: ${failed}`);
    }
  }
  return points;
}

function empty(subject: string, held: number): HeldPoint {
  return {
    subject,
    held,
    acquiredPerSecond: 0,
    renewalsPerSecond: 0,
    clientCpuMsPerSecond: 0,
    heapBytesPerLock: 0,
    retainedBytesPerLock: 0,
    lostWhileHeld: 0,
  };
}

/** Scenario 12's table and one reading per store: how renewal traffic and the heap grew from the smallest count to the largest. */
export function heldLines(points: HeldPoint[], counts: readonly number[]): string[] {
  const f = (n: number, digits = 0) => n.toFixed(digits);
  // Below a thousand locks the heap's own drift between two GCs outweighs them.
  const heap = (p: HeldPoint, bytes: number) => (p.held >= 1000 ? f(bytes) : '–');
  const lines = [
    `## Scenario 12: held locks per process (${counts.join(', ')}; ttl ${SCALE_TTL_MS / 1000} s, renewed every ${SCALE_TTL_MS / 3000} s)`,
    '',
    `One locker takes N locks (${AT_ONCE} at a time), holds them ${HOLD_MS / 1000} s (three renewal intervals) and releases them. Renewals/s are the`,
    "locker's renew calls; store requests/s the server's own counter over the hold (every client's); client CPU is this process's per",
    'second of the hold (memory: the store too); heap per lock after a full GC, held and then after the release (what stays; from 1 000',
    'held: below, the heap drifts more between two GCs than the locks take). A store',
    `whose locks took longer than ${TAKE_LIMIT_MS / 1000} s to take ends its curve there. Today every held lock is renewed by a round trip of its own.`,
    '',
    '| subject | held | acquired/s | renewals/s | store requests/s | client CPU ms/s | heap B/lock held | B/lock after release | lost while held |',
    '|---|---|---|---|---|---|---|---|---|',
    ...points.map((p) =>
      p.cut
        ? `| ${p.subject} | ${p.held} | ${f(p.acquiredPerSecond)} | ${p.cut} | | | | | |`
        : `| ${p.subject} | ${p.held} | ${f(p.acquiredPerSecond)} | ${f(p.renewalsPerSecond)} | ${p.storeRequestsPerSecond === undefined ? 'n/a' : f(p.storeRequestsPerSecond)} | ${f(p.clientCpuMsPerSecond, 1)} | ${heap(p, p.heapBytesPerLock)} | ${heap(p, p.retainedBytesPerLock)} | ${p.lostWhileHeld} |`,
    ),
    '',
  ];
  for (const subject of [...new Set(points.map((p) => p.subject))]) {
    const curve = points.filter((p) => p.subject === subject && !p.cut);
    const [first, last] = [curve[0], curve.at(-1)];
    if (!first || !last || first === last) continue;
    lines.push(
      `- ${subject}: from ${first.held} to ${last.held} held, renewals/s grew ${f(last.renewalsPerSecond / first.renewalsPerSecond, 1)}× (${f(first.renewalsPerSecond, 1)} → ${f(last.renewalsPerSecond)}), ` +
        `client CPU ${f(first.clientCpuMsPerSecond, 1)} → ${f(last.clientCpuMsPerSecond, 1)} ms/s, heap ${f(last.heapBytesPerLock)} B per held lock at ${last.held}` +
        `${last.lostWhileHeld ? `, ${last.lostWhileHeld} lost while held` : ''}.`,
    );
  }
  for (const p of points.filter((p) => p.closeFailed))
    lines.push(`- ${p.subject}: closing its locker after ${p.held} held failed: ${p.closeFailed}.`);
  lines.push('');
  return lines;
}
