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
