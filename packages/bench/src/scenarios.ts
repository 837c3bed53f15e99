// The scenarios' workloads and what each measures (the bench README describes them): one function
// or open/result pair per scenario. Long: one scenario after another.
import { createLocker, type Lock } from '@deadbolt/core';
import { sleep } from '@deadbolt/core/backend';
import { fullCapabilities, observeBackend } from '@deadbolt/core/testing';
import { claimsIn } from './loss.js';
import { jain, summarize, type Summary } from './stats.js';
import { clientCpuSeconds, type StoreProbe } from './stores.js';
import type { Client, Held, Subject } from './subjects.js';

/**
 * One acquisition as recorded: which client (of this process), when it asked, when it was granted,
 * when it let go (ms, this process's monotonic clock), and its fencing token (decimal) if it has one.
 */
export interface Acquisition {
  client: number;
  asked: number;
  granted: number;
  released: number;
  token?: string;
}

export interface UncontendedResult {
  subject: string;
  cycles: number;
  perSecond: number;
  cycle: Summary;
  /** Every timed cycle's acquire + release time, ms, in order. */
  cycleMs: number[];
  /** Requests the store's own counter saw per cycle (background traffic included); absent when it keeps none. */
  storeRequestsPerCycle?: number;
  /** This process's CPU per cycle, µs, over the timed blocks (see `clientCpuSeconds`). */
  clientCpuUs: number;
}

/** Store requests between two counter readings, per `n` operations; undefined when either reading is. */
const perOperation = (before: number | undefined, after: number | undefined, n: number) =>
  before === undefined || after === undefined || n === 0 ? undefined : (after - before) / n;

/** A store counter's total over a row's segments; undefined unless every segment read it. */
function total<K extends string>(segments: Partial<Record<K, number>>[], field: K): number | undefined {
  let sum = 0;
  for (const segment of segments) {
    const value = segment[field];
    if (value === undefined) return undefined;
    sum += value;
  }
  return sum;
}

/**
 * A timed row's segments taken together: every acquisition in grant order, the time, the rate and
 * the waits (with `alsoWaited`, waits that were given up, counted at the time they had lasted).
 */
function overall(segments: { records: Acquisition[]; seconds: number }[], alsoWaited: number[] = []) {
  const acquisitions = segments.flatMap((s) => s.records).sort((a, b) => a.granted - b.granted);
  const seconds = segments.reduce((sum, s) => sum + s.seconds, 0);
  const wait = summarize([...acquisitions.map((a) => a.granted - a.asked), ...alsoWaited]);
  return { acquisitions, seconds, perSecond: acquisitions.length / seconds, wait };
}

/** One subject of scenario 1: a client already open, and how many cycles it is timed for. */
export interface UncontendedEntry {
  name: string;
  client: Client;
  cycles: number;
}

/**
 * Scenario 1 for the subjects of one store (its floor, our backends, the peers): each client takes
 * its own key, acquire → release, `cycles` times after a warm-up. The timed cycles run in `rounds`
 * blocks, round-robin over the subjects, so that a machine whose speed drifts (shared, noisy, cores
 * waking from idle) slows every subject alike and the ratios to the floor hold. A subject that
 * fails is dropped from later rounds and reported in `failures`; the others go on.
 */
export async function uncontended(
  entries: UncontendedEntry[],
  probe?: StoreProbe,
  rounds = 10,
): Promise<{ results: UncontendedResult[]; failures: { name: string; error: unknown }[] }> {
  const { results, failures } = await interleave(
    entries.map((entry) => ({ name: entry.name, open: async () => uncontendedSession(entry, rounds, probe) })),
    rounds,
  );
  return { results: results.map(({ name, segments }) => uncontendedResult(name, segments)), failures };
}

/** One block of scenario 1: each cycle's time, the block's time, and the store's requests over it. */
interface UncontendedBlock {
  times: number[];
  busyMs: number;
  cpuSeconds: number;
  requests?: number;
}

/** Scenario 1's session over an open client (which its caller closes): block `round` is that round's share of the cycles. */
function uncontendedSession(entry: UncontendedEntry, rounds: number, probe?: StoreProbe): Session<UncontendedBlock> {
  const key = `bench:uncontended:${entry.name}:${process.pid}`;
  const { client } = entry;
  return {
    async warm() {
      const leave = client.scope?.();
      try {
        // A tenth of the cycles, at most 10 000 (in-process subjects need that many for the JIT to
        // settle), and at least 3 000 or 2 s: a client's cost per cycle falls for its first
        // thousands of cycles while V8 compiles its code (a function is optimized after a number
        // of calls that grows with its size: deadbolt's Redlock cycle settled after about 3 000
        // cycles, redis-semaphore's and the peers' Redlock after about 1 000), and a tenth of 2 000
        // timed one half-compiled client against a compiled one.
        const settled = performance.now() + 2000;
        for (let i = 0; i < Math.min(10_000, entry.cycles / 10) || (i < 3000 && performance.now() < settled); i++) {
          await (await client.acquire(key)).release();
        }
      } finally {
        leave?.();
      }
    },
    async run(round) {
      const n = Math.floor(entry.cycles / rounds) + (round < entry.cycles % rounds ? 1 : 0);
      const times: number[] = [];
      const before = await probe?.requests();
      const leave = client.scope?.();
      const cpuBefore = clientCpuSeconds();
      const started = performance.now();
      try {
        for (let i = 0; i < n; i++) {
          // The cycle written out, not wrapped in a function: an in-process store would time the wrapper too.
          const t = performance.now();
          await (await client.acquire(key)).release();
          times.push(performance.now() - t);
        }
      } finally {
        leave?.();
      }
      const busyMs = performance.now() - started;
      const cpuSeconds = clientCpuSeconds() - cpuBefore;
      const requests = perOperation(before, await probe?.requests(), 1);
      return { times, busyMs, cpuSeconds, ...(requests === undefined ? {} : { requests }) };
    },
    close: async () => undefined,
  };
}

function uncontendedResult(subject: string, blocks: UncontendedBlock[]): UncontendedResult {
  const times = blocks.flatMap((b) => b.times);
  const busyMs = blocks.reduce((sum, b) => sum + b.busyMs, 0);
  const requests = perOperation(0, total(blocks, 'requests'), times.length);
  return {
    subject,
    cycles: times.length,
    perSecond: times.length / (busyMs / 1000),
    cycle: summarize(times),
    cycleMs: times,
    clientCpuUs: (total(blocks, 'cpuSeconds')! / times.length) * 1e6,
    ...(requests === undefined ? {} : { storeRequestsPerCycle: requests }),
  };
}

export interface ContendedResult {
  subject: string;
  clients: number;
  holdMs: number;
  seconds: number;
  holdsPerSecond: number;
  wait: Summary;
  /** Release → next holder entering, only where the next holder is a different client. */
  handoff: Summary;
  handoffsToOther: number;
  /** Waits still pending `STRAGGLER_GRACE_MS` after their segment ended, given up (counted in `wait` with the time they had waited). */
  gaveUp: number;
  jain: number;
  /** Fencing tokens in grant order that did not increase (must be 0; undefined for lock libraries without tokens). */
  tokenOrderViolations?: number;
  acquisitions: Acquisition[];
}

/**
 * A subject's scenario with its clients open: `warm()` runs a discarded warm-up, `run(round)` times
 * that round's segment (a share of the row's cycles or time).
 */
export interface Session<S> {
  warm(): Promise<void>;
  run(round: number): Promise<S>;
  close(): Promise<void>;
}

/**
 * Runs the sessions of one store's subjects round-robin: every session is warmed up, then each of
 * `rounds` rounds times one segment per session, so a drift in the machine's speed reaches every
 * subject alike. A subject that fails to open or run is dropped and reported in `failures`; the
 * others go on. Every session is closed whatever happens.
 */
export async function interleave<S>(
  subjects: { name: string; open: () => Promise<Session<S>> }[],
  rounds: number,
): Promise<{ results: { name: string; segments: S[] }[]; failures: { name: string; error: unknown }[] }> {
  const failures: { name: string; error: unknown }[] = [];
  const opened: Session<S>[] = [];
  let live: { name: string; session: Session<S>; segments: S[] }[] = [];
  const attempt = async (entry: (typeof live)[number], body: () => Promise<void>) => {
    try {
      await body();
    } catch (error) {
      failures.push({ name: entry.name, error });
      live = live.filter((e) => e !== entry);
    }
  };
  try {
    for (const { name, open } of subjects) {
      try {
        const session = await open();
        opened.push(session);
        live.push({ name, session, segments: [] });
      } catch (error) {
        failures.push({ name, error });
      }
    }
    for (const entry of live) await attempt(entry, () => entry.session.warm());
    for (let round = 0; round < rounds; round++) {
      for (const entry of live) await attempt(entry, async () => void entry.segments.push(await entry.session.run(round)));
    }
    return { results: live.map(({ name, segments }) => ({ name, segments })), failures };
  } finally {
    await Promise.allSettled(opened.map((s) => s.close()));
  }
}

/** One timed segment of scenario 3: its acquisitions, the waits it gave up (ms waited), and how long it ran. */
export interface ContendedSegment {
  records: Acquisition[];
  gaveUp: number[];
  seconds: number;
}

/**
 * How long after its end a segment still waits for a client's pending acquire. A subject that
 * livelocks (see `Subject.livelocksAbove`) once held one scenario-3 row for 196 s; past this the
 * wait is given up, so the benchmark's own run time stays bounded.
 */
export const STRAGGLER_GRACE_MS = 10_000;

/**
 * Scenario 3's session: `clients` clients (own connections, one process) on one key, `holdMs`
 * critical section; a wait still pending `graceMs` after its segment's end is given up.
 */
export async function openContended(
  subject: Subject,
  clients: number,
  holdMs: number,
  segmentMs: number,
  warmMs = 1000,
  graceMs = STRAGGLER_GRACE_MS,
): Promise<Session<ContendedSegment>> {
  const key = `bench:contended:${subject.name}:${clients}:${holdMs}:${process.pid}`;
  const made = await Promise.all(Array.from({ length: clients }, () => subject.client()));
  const time = async (ms: number): Promise<ContendedSegment> => {
    const records: Acquisition[] = [];
    const gaveUp: number[] = [];
    const started = performance.now();
    const end = started + ms;
    await Promise.all(
      made.map(async (client, index) => {
        // One signal per client: it has one acquire pending at a time, so one abort listener.
        const stragglers = AbortSignal.timeout(Math.ceil(ms + graceMs));
        while (performance.now() < end) {
          const asked = performance.now();
          let held: Held;
          try {
            held = await client.acquire(key, stragglers);
          } catch (error) {
            if (!stragglers.aborted) throw error;
            gaveUp.push(performance.now() - asked);
            break;
          }
          const granted = performance.now();
          if (holdMs > 0) await sleep(holdMs);
          else await Promise.resolve(); // an empty critical section: hand over at once
          const released = performance.now();
          await held.release();
          records.push({ client: index, asked, granted, released, ...(held.token === undefined ? {} : { token: String(held.token) }) });
        }
      }),
    );
    return { records, gaveUp, seconds: (performance.now() - started) / 1000 };
  };
  return {
    warm: async () => void (await time(warmMs)),
    run: () => time(segmentMs),
    close: async () => void (await Promise.all(made.map((c) => c.close()))),
  };
}

/** Scenario 3's result from a subject's segments (handoffs are counted within a segment, never across the gap between two). */
export function contendedResult(subject: string, clients: number, holdMs: number, segments: ContendedSegment[]): ContendedResult {
  const handoffs: number[] = [];
  for (const { records } of segments) {
    const inOrder = [...records].sort((a, b) => a.granted - b.granted);
    for (let i = 1; i < inOrder.length; i++) {
      const [prev, next] = [inOrder[i - 1]!, inOrder[i]!];
      if (prev.client !== next.client) handoffs.push(Math.max(0, next.granted - prev.released));
    }
  }
  // A wait given up had lasted at least that long: it counts in the waits, as a lower bound.
  const gaveUp = segments.flatMap((s) => s.gaveUp);
  const { acquisitions, seconds, perSecond, wait } = overall(segments, gaveUp);
  const counts = Array.from({ length: clients }, (_, c) => acquisitions.filter((a) => a.client === c).length);
  // Tokens are checked across segments too: one key, so they must rise over the whole run.
  const tokens = acquisitions
    .map((a) => a.token)
    .filter((t) => t !== undefined)
    .map(BigInt);
  const violations = tokens.filter((t, i) => i > 0 && t <= tokens[i - 1]!).length;
  return {
    subject,
    clients,
    holdMs,
    seconds,
    holdsPerSecond: perSecond,
    wait,
    handoff: summarize(handoffs.length ? handoffs : [0]),
    handoffsToOther: handoffs.length,
    gaveUp: gaveUp.length,
    jain: jain(counts),
    ...(tokens.length ? { tokenOrderViolations: violations } : {}),
    acquisitions,
  };
}

/** Scenario 3 for one subject alone, in one segment (a warm-up first). */
export async function contended(subject: Subject, clients: number, holdMs: number, durationMs: number): Promise<ContendedResult> {
  const session = await openContended(subject, clients, holdMs, durationMs, Math.min(1000, durationMs / 3));
  try {
    await session.warm();
    return contendedResult(subject.name, clients, holdMs, [await session.run(0)]);
  } finally {
    await session.close();
  }
}

export interface ThesisResult {
  subject: string;
  processes: number;
  perProcess: number;
  seconds: number;
  wait: Summary;
  /** Per process: [wait ms, completed ms since start, token] for every acquisition, in order. */
  series: [number, number, string?][][];
}

/**
 * Scenario 2, the thesis experiment (the Cassandra fair-lock thesis): `processes` real processes take one shared key
 * `perProcess` times each with an empty critical section, started together.
 */
export async function thesis(subject: Subject, processes: number, perProcess: number): Promise<ThesisResult> {
  const { fork } = await import('node:child_process');
  const key = `bench:thesis:${subject.name}:${processes}:${process.pid}`;
  const worker = new URL('./thesis-worker.js', import.meta.url);
  const children = Array.from({ length: processes }, () =>
    fork(worker, [subject.name, key, String(perProcess)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }),
  );
  const message = <T>(child: (typeof children)[number], field: string) =>
    new Promise<T>((resolve, reject) => {
      child.on('message', (m: Record<string, unknown>) => field in m && resolve(m[field] as T));
      child.once('exit', (code) => reject(new Error(`thesis worker exited with ${code} before sending ${field}`)));
    });
  try {
    await Promise.all(children.map((c) => message(c, 'ready')));
    const results = children.map((c) => message<[number, number, string?][]>(c, 'records'));
    const go = performance.timeOrigin + performance.now();
    for (const c of children) c.send({ go });
    const series = await Promise.all(results);
    const seconds = Math.max(...series.flat().map(([, done]) => done)) / 1000;
    return { subject: subject.name, processes, perProcess, seconds, wait: summarize(series.flat().map(([w]) => w)), series };
  } finally {
    for (const c of children) if (c.exitCode === null) c.kill();
  }
}

export interface ManyKeysResult {
  subject: string;
  workers: number;
  keys: number;
  seconds: number;
  perSecond: number;
  wait: Summary;
  /** CPU seconds the store's server process used per 1000 acquisitions (undefined when unknown). */
  storeCpuPer1000?: number;
  /** Requests the store's own counter saw per acquisition (undefined when it keeps none). */
  storeRequestsPerAcquisition?: number;
  /** This process's CPU per acquisition (acquire and release), µs (see `clientCpuSeconds`). */
  clientCpuUs: number;
  /** Every timed acquisition; `client` is the worker. */
  acquisitions: Acquisition[];
}

/** Ranks 0..n-1 drawn with probability ∝ 1/(rank+1)^s. */
export function zipf(n: number, s = 1): () => number {
  const cdf = new Float64Array(n);
  let total = 0;
  for (let i = 0; i < n; i++) cdf[i] = total += 1 / (i + 1) ** s;
  return () => {
    const u = Math.random() * total;
    let [lo, hi] = [0, n - 1];
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
}

/** One timed segment of scenario 4: its acquisitions, how long it ran, and the store's counters over it. */
export interface ManyKeysSegment {
  records: Acquisition[];
  seconds: number;
  clientCpuSeconds: number;
  cpuSeconds?: number;
  requests?: number;
}

/**
 * Scenario 4's session: `workers` workers (sharing `connections` clients) lock keys drawn from a
 * Zipf distribution over `keys` keys, empty critical section. `probe` reads the store server's CPU
 * time and request counter around each segment.
 */
export async function openManyKeys(
  subject: Subject,
  workers: number,
  keys: number,
  connections: number,
  segmentMs: number,
  probe: StoreProbe,
  warmMs = 1000,
): Promise<Session<ManyKeysSegment>> {
  const made = await Promise.all(Array.from({ length: connections }, () => subject.client()));
  const draw = zipf(keys);
  const prefix = `bench:many:${subject.name}:${process.pid}:`;
  const go = async (ms: number, records?: Acquisition[]) => {
    const end = performance.now() + ms;
    await Promise.all(
      Array.from({ length: workers }, async (_, w) => {
        const client = made[w % made.length]!;
        while (performance.now() < end) {
          const asked = performance.now();
          const held = await client.acquire(prefix + draw());
          const granted = performance.now();
          await held.release();
          records?.push({
            client: w,
            asked,
            granted,
            released: granted,
            ...(held.token === undefined ? {} : { token: String(held.token) }),
          });
        }
      }),
    );
  };
  return {
    warm: () => go(warmMs),
    async run() {
      const records: Acquisition[] = [];
      const [cpuBefore, requestsBefore] = [probe.cpuSeconds(), await probe.requests()];
      const ownBefore = clientCpuSeconds();
      const started = performance.now();
      await go(segmentMs, records);
      const seconds = (performance.now() - started) / 1000;
      const own = clientCpuSeconds() - ownBefore;
      const cpu = perOperation(cpuBefore, probe.cpuSeconds(), 1);
      const requests = perOperation(requestsBefore, await probe.requests(), 1);
      return {
        records,
        seconds,
        clientCpuSeconds: own,
        ...(cpu === undefined ? {} : { cpuSeconds: cpu }),
        ...(requests === undefined ? {} : { requests }),
      };
    },
    close: async () => void (await Promise.all(made.map((c) => c.close()))),
  };
}

/** Scenario 4's result from a subject's segments. */
export function manyKeysResult(subject: string, workers: number, keys: number, segments: ManyKeysSegment[]): ManyKeysResult {
  const { acquisitions, seconds, perSecond, wait } = overall(segments);
  const cpu = perOperation(0, total(segments, 'cpuSeconds'), acquisitions.length / 1000);
  const requests = perOperation(0, total(segments, 'requests'), acquisitions.length);
  return {
    subject,
    workers,
    keys,
    seconds,
    perSecond,
    wait,
    clientCpuUs: (total(segments, 'clientCpuSeconds')! / acquisitions.length) * 1e6,
    ...(cpu === undefined ? {} : { storeCpuPer1000: cpu }),
    ...(requests === undefined ? {} : { storeRequestsPerAcquisition: requests }),
    acquisitions,
  };
}

export interface LongHoldResult {
  subject: string;
  locks: number;
  ttlMs: number;
  holdSeconds: number;
  /** renew() calls the Locker made, per lock per minute of holding. */
  renewalsPerMinute: number;
  /** Requests the store's counter saw per lock per minute of holding (background traffic included). */
  storeRequestsPerMinute?: number;
  /** Locks whose signal aborted while nobody interfered (must be 0). */
  lostWhileHeld: number;
  /** ms from sending the injected deletion to `lock.signal` aborting, one sample per lock. */
  lossToAbort?: Summary;
  /** Injected losses the holder had not noticed within 2 × ttl (must be 0). */
  unnoticed: number;
}

/** Resolves with the `performance.now()` at which `signal` aborted, or undefined after `limitMs`. */
function abortTime(signal: AbortSignal, limitMs: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(performance.now());
    const timer = setTimeout(() => resolve(undefined), limitMs);
    signal.addEventListener('abort', () => (clearTimeout(timer), resolve(performance.now())), { once: true });
  });
}

/**
 * Scenario 5, long holds: one Locker holds `locks` keys for `holdMs` with a short ttl (2 s, or the
 * backend's minimum), counting its renewals and the store's requests; then the store forgets each
 * lock in turn (at a random point of its renewal cycle) and the time until `lock.signal` aborts is
 * measured.
 */
export async function longHolds(subject: Subject, locks: number, holdMs: number, probe: StoreProbe): Promise<LongHoldResult> {
  const backend = subject.backend!();
  const { minTtlMs, ttlGranularityMs } = fullCapabilities(backend.capabilities);
  const ttlMs = Math.ceil(Math.max(2000, minTtlMs) / ttlGranularityMs) * ttlGranularityMs;
  let renewals = 0;
  const counted = observeBackend(backend, (method) => {
    if (method === 'renew') renewals++;
  });
  const locker = createLocker(counted, { ttlMs });
  const prefix = `bench:long:${subject.name}:${process.pid}:`;
  try {
    const held: Lock[] = await Promise.all(Array.from({ length: locks }, (_, i) => locker.lock(prefix + i)));
    const [requestsBefore, renewalsBefore, started] = [await probe.requests(), renewals, performance.now()];
    await sleep(holdMs);
    const renewed = renewals - renewalsBefore;
    const lockMinutes = (locks * (performance.now() - started)) / 60_000;
    const requests = perOperation(requestsBefore, await probe.requests(), lockMinutes);
    const lostWhileHeld = held.filter((lock) => lock.signal.aborted).length;
    const claims = claimsIn(subject.store, backend);
    const delays: number[] = [];
    let unnoticed = 0;
    for (const lock of claims ? held : []) {
      if (lock.signal.aborted) continue;
      await sleep(Math.random() * (ttlMs / 3)); // anywhere in the renewal cycle
      const aborted = abortTime(lock.signal, 2 * ttlMs);
      const sent = performance.now();
      await claims!.loseClaim(lock.key);
      const at = await aborted;
      if (at === undefined) unnoticed++;
      else delays.push(at - sent);
    }
    await Promise.all(held.map((lock) => lock.release()));
    return {
      subject: subject.name,
      locks,
      ttlMs,
      holdSeconds: holdMs / 1000,
      renewalsPerMinute: renewed / lockMinutes,
      ...(requests === undefined ? {} : { storeRequestsPerMinute: requests }),
      lostWhileHeld,
      ...(delays.length ? { lossToAbort: summarize(delays) } : {}),
      unnoticed,
    };
  } finally {
    await locker.close();
  }
}
