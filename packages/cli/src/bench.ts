// `deadbolt bench URL…`: how fast locking is on the user's own stores, side by side. Two workloads
// per store, one store after another: one client taking and giving back one key (a cycle's
// latency), and several clients, each with its own connection, contending for one key with a
// short hold (hand-offs per second and how long each waited). The repository's benchmark
// (`pnpm bench`) adds each store's raw floor, the peer libraries and more workloads.
import { createLocker, type Locker } from '@deadbolt/core';
import { backendFor, storeOf } from './stores.js';

export interface BenchRequest {
  readonly urls: readonly string[];
  /** How long each workload runs on each store. */
  readonly seconds: number;
  /** Contending clients. */
  readonly clients: number;
  /** How long a contended hold lasts. */
  readonly holdMs: number;
}

/** One store's numbers (times in ms). */
export interface BenchRow {
  /** The store as the URL names it, without credentials or options. */
  readonly store: string;
  readonly uncontended: { readonly cycles: number; readonly perSecond: number; readonly p50: number; readonly p99: number };
  readonly contended: {
    readonly clients: number;
    readonly holds: number;
    readonly perSecond: number;
    readonly waitP50: number;
    readonly waitP99: number;
    readonly waitMax: number;
    /** The most holders this process saw at once (1 unless exclusion failed). */
    readonly mostAtOnce: number;
  };
}

/**
 * Runs both workloads on each store in turn; resolves a row per URL. Keys are `deadbolt-bench/…`
 * under the store's default namespace (or the one the URL sets); every lock taken is released.
 * @throws InvalidArgumentError for a bad URL (all are checked before any I/O);
 * BackendUnavailableError (or the store's error) when a store fails during its run.
 */
export async function bench(req: BenchRequest, progress: (line: string) => void = () => undefined): Promise<BenchRow[]> {
  for (const url of req.urls) storeOf(url);
  const rows: BenchRow[] = [];
  for (const url of req.urls) {
    const store = shown(url);
    progress(`${store}: one client, one key, ${req.seconds} s`);
    const uncontended = await alone(url, req.seconds);
    progress(`${store}: ${req.clients} clients on one key, ${req.holdMs} ms holds, ${req.seconds} s`);
    const contended = await together(url, req);
    rows.push({ store, uncontended, contended });
  }
  return rows;
}

/** `url` without credentials and query: what the table shows. */
function shown(url: string): string {
  return url.replace(/\?.*$/, '').replace(/\/\/[^@/]*@/, '//');
}

const key = () => `deadbolt-bench/${process.pid}/${Math.random().toString(36).slice(2, 10)}`;

async function alone(url: string, seconds: number): Promise<BenchRow['uncontended']> {
  const locker = createLocker(await backendFor(url));
  try {
    const k = key();
    // Connections opened and code warmed before the clock starts.
    for (let i = 0; i < 100; i++) await (await locker.lock(k)).release();
    const times: number[] = [];
    const started = performance.now();
    const until = started + seconds * 1000;
    while (performance.now() < until) {
      const t = performance.now();
      await (await locker.lock(k)).release();
      times.push(performance.now() - t);
    }
    const elapsed = performance.now() - started;
    return { cycles: times.length, perSecond: times.length / (elapsed / 1000), p50: quantile(times, 0.5), p99: quantile(times, 0.99) };
  } finally {
    await locker.close();
  }
}

async function together(url: string, req: BenchRequest): Promise<BenchRow['contended']> {
  const lockers: Locker[] = [];
  try {
    for (let i = 0; i < req.clients; i++) lockers.push(createLocker(await backendFor(url)));
    const k = key();
    // Every client connected before the clock starts.
    for (const locker of lockers) await (await locker.lock(k)).release();
    const waits: number[] = [];
    let holding = 0;
    let mostAtOnce = 0;
    const started = performance.now();
    const until = started + req.seconds * 1000;
    await Promise.all(
      lockers.map(async (locker) => {
        while (performance.now() < until) {
          const asked = performance.now();
          const lock = await locker.lock(k);
          waits.push(performance.now() - asked);
          mostAtOnce = Math.max(mostAtOnce, ++holding);
          await new Promise((r) => setTimeout(r, req.holdMs));
          holding--;
          await lock.release();
        }
      }),
    );
    const elapsed = performance.now() - started;
    return {
      clients: req.clients,
      holds: waits.length,
      perSecond: waits.length / (elapsed / 1000),
      waitP50: quantile(waits, 0.5),
      waitP99: quantile(waits, 0.99),
      waitMax: Math.max(...waits),
      mostAtOnce,
    };
  } finally {
    await Promise.allSettled(lockers.map((l) => l.close()));
  }
}

/** The `q` quantile of `values` (nearest rank). */
function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/** The rows as a Markdown table. */
export function benchTable(rows: readonly BenchRow[], req: BenchRequest): string {
  const ms = (n: number) => (n < 10 ? n.toFixed(2) : n.toFixed(0));
  const lines = [
    `| store | one client: cycles/s | cycle p50 ms | cycle p99 ms | ${req.clients} clients, ${req.holdMs} ms holds: holds/s | wait p50 ms | wait p99 ms | wait max ms |`,
    '|---|---|---|---|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| ${r.store} | ${Math.round(r.uncontended.perSecond)} | ${ms(r.uncontended.p50)} | ${ms(r.uncontended.p99)} | ${Math.round(r.contended.perSecond)} | ${ms(r.contended.waitP50)} | ${ms(r.contended.waitP99)} | ${ms(r.contended.waitMax)} |`,
    ),
  ];
  return lines.join('\n');
}
