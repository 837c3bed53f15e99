/**
 * Scenario 13: waiters on one key. N + 1 contenders (N = 1, 10, 100, 1 000) on one key, spread over
 * up to 8 lockers (each with connections of its own): the one holding releases at once and takes
 * its place at the back of the line again, so every handoff happens with N waiting. Per N: the
 * handoff's latency (from the release's start to the next grant), the store's requests per handoff
 * (its own counter: what the waiters' watching or polling costs it), and how evenly the grants
 * fell (Jain's index over the contenders). The curve says whether a handoff's cost depends on how
 * many wait.
 */
import { createLocker, type Lock, type Locker } from '@deadbolt/core';
import { sleep } from '@deadbolt/core/backend';
import { setMaxListeners } from 'node:events';
import { jain, summarize, type Summary } from './stats.js';
import type { StoreProbe } from './stores.js';
import type { Subject } from './subjects.js';

/** One point of a store's curve. */
export interface WaitersPoint {
  subject: string;
  waiters: number;
  handoffs: number;
  /** From a release's start to the next contender's grant, ms. */
  handoff: Summary | undefined;
  /** The server's requests per handoff over the timed part (every client's); undefined where it keeps no counter. */
  storeRequestsPerHandoff?: number;
  /** Jain's fairness of the grants over the N + 1 contenders; undefined with fewer than two handoffs per contender. */
  fairness?: number;
  /** Why the curve stopped here (a contender's wait failed, or the line did not form in time). */
  cut?: string;
}

/** The lockers the contenders are spread over: enough to be several clients, few enough to keep one process's connections sane. */
const LOCKERS = 8;
/** Long enough that no waiter's lease runs out while it waits behind a thousand handoffs. */
const TTL_MS = 30_000;

/**
 * Scenario 13 for one deadbolt subject: each of `counts` waiters, `timedMs` of handoffs (or two per
 * contender, whichever comes first, at least 50 handoffs). A count whose contenders fail (a wait
 * that errs or times out) ends the curve there with the reason.
 */
export async function waitersCurve(
  subject: Subject,
  counts: readonly number[],
  timedMs: number,
  probe: StoreProbe,
): Promise<WaitersPoint[]> {
  const points: WaitersPoint[] = [];
  for (const waiters of counts) {
    const point = await onePoint(subject, waiters, timedMs, probe);
    points.push(point);
    if (point.cut) break;
  }
  return points;
}

async function onePoint(subject: Subject, waiters: number, timedMs: number, probe: StoreProbe): Promise<WaitersPoint> {
  const contenders = waiters + 1;
  const lockers: Locker[] = Array.from({ length: Math.min(LOCKERS, contenders) }, () =>
    createLocker(subject.backend!(), { ttlMs: TTL_MS }),
  );
  const key = `bench:waiters:${process.pid}:${waiters}:${Date.now()}`;
  const stop = new AbortController();
  // Every waiting contender listens on it: up to a thousand at once, not a leak.
  setMaxListeners(0, stop.signal);
  const grants = new Array<number>(contenders).fill(0);
  const latencies: number[] = [];
  let releasedAt: number | undefined;
  let timing = false;
  let failure: string | undefined;
  const target = Math.max(50, 2 * contenders);
  let handoffs = 0;
  let enough: () => void = () => undefined;
  const reached = new Promise<void>((resolve) => (enough = resolve));

  const contend = async (i: number, first?: Lock) => {
    let lock: Lock | undefined = first;
    try {
      for (;;) {
        lock ??= await lockers[i % lockers.length]!.lock(key, { signal: stop.signal, timeoutMs: 600_000 });
        if (releasedAt !== undefined && timing) {
          latencies.push(performance.now() - releasedAt);
          grants[i]!++;
          if (++handoffs >= target) enough();
        }
        if (stop.signal.aborted) return void (await lock.release());
        releasedAt = performance.now();
        await lock.release();
        lock = undefined;
      }
    } catch (error) {
      if (!stop.signal.aborted) {
        failure ??= error instanceof Error ? error.message : String(error);
        enough();
      }
    }
  };

  try {
    // The line forms behind a holder: every waiter queued (or polling) before the timing starts.
    const holder = await lockers[0]!.lock(key);
    const running = Array.from({ length: waiters }, (_, i) => contend(i + 1));
    await sleep(Math.min(10_000, 500 + waiters * 5));
    const [requestsBefore, started] = [await probe.requests(), performance.now()];
    timing = true;
    running.push(contend(0, holder));
    await Promise.race([reached, sleep(timedMs)]);
    const seconds = (performance.now() - started) / 1000;
    const requestsAfter = await probe.requests();
    const counted = handoffs;
    stop.abort(new Error('the step is over'));
    await Promise.all(running);
    if (failure !== undefined) return { subject: subject.name, waiters, handoffs: counted, handoff: undefined, cut: failure };
    return {
      subject: subject.name,
      waiters,
      handoffs: counted,
      handoff: latencies.length ? summarize(latencies) : undefined,
      ...(requestsBefore === undefined || requestsAfter === undefined || counted === 0
        ? {}
        : { storeRequestsPerHandoff: (requestsAfter - requestsBefore) / counted }),
      ...(counted >= 2 * contenders ? { fairness: jain(grants) } : {}),
      ...(counted === 0 ? { cut: `no handoff in ${f(seconds, 1)} s` } : {}),
    };
  } finally {
    await Promise.all(lockers.map((l) => l.close().catch(() => undefined)));
  }
}

const f = (n: number, digits = 0) => n.toFixed(digits);

/** Scenario 13's table and one reading per store: how the handoff's p99 and its store work grew from 10 waiters to the most. */
export function waitersLines(points: WaitersPoint[], counts: readonly number[], timedMs: number): string[] {
  const lines = [
    `## Scenario 13: waiters on one key (${counts.join(', ')} waiting; ${timedMs / 1000} s of handoffs each)`,
    '',
    `N + 1 contenders on one key over up to ${LOCKERS} lockers: the holder releases at once and queues again, so each handoff happens`,
    "with N waiting. Handoff: from the release to the next grant. Store requests per handoff: the server's own counter over the timed",
    "part, every client's (the waiters' watching or polling included). Fairness: Jain's index of the grants over the contenders (1 is",
    'even), shown once every contender could have had two grants.',
    '',
    '| subject | waiting | handoffs | handoff p50 / p99 ms | store requests / handoff | fairness |',
    '|---|---|---|---|---|---|',
    ...points.map((p) =>
      p.cut && !p.handoff
        ? `| ${p.subject} | ${p.waiters} | ${p.handoffs} | ${p.cut} | | |`
        : `| ${p.subject} | ${p.waiters} | ${p.handoffs} | ${p.handoff ? `${f(p.handoff.p50, 2)} / ${f(p.handoff.p99, 2)}` : '–'} | ${p.storeRequestsPerHandoff === undefined ? 'n/a' : f(p.storeRequestsPerHandoff, 1)} | ${p.fairness === undefined ? '–' : f(p.fairness, 2)} |`,
    ),
    '',
  ];
  for (const subject of [...new Set(points.map((p) => p.subject))]) {
    const curve = points.filter((p) => p.subject === subject && p.handoff && p.waiters >= 10);
    const [first, last] = [curve[0], curve.at(-1)];
    const cut = points.find((p) => p.subject === subject && p.cut);
    if (first && last && first !== last)
      lines.push(
        `- ${subject}: from ${first.waiters} to ${last.waiters} waiting, the handoff's p99 grew ${f(last.handoff!.p99 / first.handoff!.p99, 1)}× ` +
          `(${f(first.handoff!.p99, 1)} → ${f(last.handoff!.p99, 1)} ms)` +
          (first.storeRequestsPerHandoff !== undefined && last.storeRequestsPerHandoff !== undefined
            ? `, store requests per handoff ${f(first.storeRequestsPerHandoff, 1)} → ${f(last.storeRequestsPerHandoff, 1)}`
            : '') +
          `${cut ? `; stopped at ${cut.waiters}: ${cut.cut}` : ''}.`,
      );
    else if (cut) lines.push(`- ${subject}: stopped at ${cut.waiters} waiting: ${cut.cut}.`);
  }
  lines.push('');
  return lines;
}
