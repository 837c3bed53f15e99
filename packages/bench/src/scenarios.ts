import { sleep } from '@deadbolt/core';
import { jain, summarize, type Summary } from './stats.js';
import type { Client, Subject } from './subjects.js';


/** One acquisition as recorded: who, when it asked, when it was granted, when it let go (ms). */
export interface Acquisition {
  client: number;
  asked: number;
  granted: number;
  released: number;
}

export interface UncontendedResult {
  subject: string;
  cycles: number;
  perSecond: number;
  cycle: Summary;
}

/** Scenario 1: one client, one key, acquire → release `cycles` times after a warm-up. */
export async function uncontended(name: string, client: Client, cycles: number): Promise<UncontendedResult> {
  const key = `bench:uncontended:${name}:${process.pid}`;
  for (let i = 0; i < Math.min(500, cycles / 10); i++) await (await client.acquire(key))();
  const times: number[] = [];
  const started = performance.now();
  for (let i = 0; i < cycles; i++) {
    const t = performance.now();
    await (await client.acquire(key))();
    times.push(performance.now() - t);
  }
  const seconds = (performance.now() - started) / 1000;
  return { subject: name, cycles, perSecond: cycles / seconds, cycle: summarize(times) };
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
  jain: number;
  acquisitions: Acquisition[];
}

/** Scenario 3: `clients` clients (own connections, one process) on one key, `holdMs` critical section. */
export async function contended(subject: Subject, clients: number, holdMs: number, durationMs: number): Promise<ContendedResult> {
  const key = `bench:contended:${subject.name}:${clients}:${process.pid}`;
  const made = await Promise.all(Array.from({ length: clients }, () => subject.client()));
  const run = async (ms: number) => {
    const records: Acquisition[] = [];
    const end = performance.now() + ms;
    await Promise.all(
      made.map(async (client, index) => {
        while (performance.now() < end) {
          const asked = performance.now();
          const release = await client.acquire(key);
          const granted = performance.now();
          if (holdMs > 0) await sleep(holdMs);
          else await Promise.resolve(); // an empty critical section: hand over at once
          const released = performance.now();
          await release();
          records.push({ client: index, asked, granted, released });
        }
      }),
    );
    return records;
  };
  try {
    await run(Math.min(1000, durationMs / 3)); // warm-up, discarded
    const started = performance.now();
    const acquisitions = await run(durationMs);
    const seconds = (performance.now() - started) / 1000;
    acquisitions.sort((a, b) => a.granted - b.granted);
    const handoffs: number[] = [];
    for (let i = 1; i < acquisitions.length; i++) {
      const [prev, next] = [acquisitions[i - 1]!, acquisitions[i]!];
      if (prev.client !== next.client) handoffs.push(Math.max(0, next.granted - prev.released));
    }
    const counts = Array.from({ length: clients }, (_, c) => acquisitions.filter((a) => a.client === c).length);
    return {
      subject: subject.name,
      clients,
      holdMs,
      seconds,
      holdsPerSecond: acquisitions.length / seconds,
      wait: summarize(acquisitions.map((a) => a.granted - a.asked)),
      handoff: summarize(handoffs.length ? handoffs : [0]),
      handoffsToOther: handoffs.length,
      jain: jain(counts),
      acquisitions,
    };
  } finally {
    await Promise.all(made.map((c) => c.close()));
  }
}

export interface ThesisResult {
  subject: string;
  processes: number;
  perProcess: number;
  seconds: number;
  wait: Summary;
  /** Per process: [wait ms, completed ms since start] for every acquisition, in order. */
  series: [number, number][][];
}

/**
 * Scenario 2, the thesis experiment (seed 000): `processes` real processes take one shared key
 * `perProcess` times each with an empty critical section, started together.
 */
export async function thesis(subject: Subject, processes: number, perProcess: number): Promise<ThesisResult> {
  const { fork } = await import('node:child_process');
  const key = `bench:thesis:${subject.name}:${processes}:${process.pid}`;
  const worker = new URL('./thesis-worker.js', import.meta.url);
  const children = Array.from({ length: processes }, () => fork(worker, [subject.name, key, String(perProcess)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
  const message = <T>(child: (typeof children)[number], field: string) =>
    new Promise<T>((resolve, reject) => {
      child.on('message', (m: Record<string, unknown>) => field in m && resolve(m[field] as T));
      child.once('exit', (code) => reject(new Error(`thesis worker exited with ${code} before sending ${field}`)));
    });
  try {
    await Promise.all(children.map((c) => message(c, 'ready')));
    const results = children.map((c) => message<[number, number][]>(c, 'records'));
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

/**
 * Scenario 4: `workers` workers (sharing `connections` clients) lock keys drawn from a Zipf
 * distribution over `keys` keys, empty critical section, for `durationMs`. `cpuSeconds` reads the
 * store server's CPU time, when it can be found.
 */
export async function manyKeys(subject: Subject, workers: number, keys: number, connections: number, durationMs: number, cpuSeconds: () => number | undefined): Promise<ManyKeysResult> {
  const made = await Promise.all(Array.from({ length: connections }, () => subject.client()));
  const draw = zipf(keys);
  const prefix = `bench:many:${subject.name}:${process.pid}:`;
  const waits: number[] = [];
  const run = async (ms: number, record: boolean) => {
    const end = performance.now() + ms;
    await Promise.all(
      Array.from({ length: workers }, async (_, w) => {
        const client = made[w % made.length]!;
        while (performance.now() < end) {
          const asked = performance.now();
          const release = await client.acquire(prefix + draw());
          if (record) waits.push(performance.now() - asked);
          await release();
        }
      }),
    );
  };
  try {
    await run(Math.min(1000, durationMs / 3), false); // warm-up
    const cpuBefore = cpuSeconds();
    const started = performance.now();
    await run(durationMs, true);
    const seconds = (performance.now() - started) / 1000;
    const cpuAfter = cpuSeconds();
    const cpu = cpuBefore !== undefined && cpuAfter !== undefined ? ((cpuAfter - cpuBefore) * 1000) / waits.length : undefined;
    return { subject: subject.name, workers, keys, seconds, perSecond: waits.length / seconds, wait: summarize(waits), ...(cpu === undefined ? {} : { storeCpuPer1000: cpu }) };
  } finally {
    await Promise.all(made.map((c) => c.close()));
  }
}
