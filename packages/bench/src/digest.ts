/**
 * What a run shows, for the report's first screen: a few sentences (the headline), one row per
 * store (at a glance: ours against the store's floor and the peers), and a bar chart per scenario.
 * Computed from the same results the summary's tables print; nothing here is measured again.
 */
import type { Bar, BarChart } from './report.js';
import type { ContendedResult, LongHoldResult, ManyKeysResult, UncontendedResult } from './scenarios.js';

/** A subject as the digest needs it: its store, and whether it is deadbolt's (else a floor or peer). */
export interface Named {
  name: string;
  store: string;
  ours: boolean;
}

export interface DigestInput {
  subjects: Named[];
  /** The floor's result of a subject's store (scenario 1), if it ran. */
  floorOf: (subject: string) => UncontendedResult | undefined;
  uncontended: UncontendedResult[];
  contended: ContendedResult[];
  semaphore: ContendedResult[];
  readWrite: ContendedResult[];
  manyKeys: ManyKeysResult[];
  migration: { pair: string; from: UncontendedResult; to: UncontendedResult; dual: UncontendedResult }[];
  longHolds: LongHoldResult[];
  failures: string[];
}

/**
 * A subject's uncontended cycle over its store's floor: the p50s' ratio, except under 50 µs, where
 * a p50 is a few ticks of the timer (memory: 1 µs each) and the ratio of mean cycles (from the
 * throughput) is given instead (`mean: true`).
 */
export function floorRatio(r: UncontendedResult, floor: UncontendedResult): { value: number; mean: boolean } {
  return floor.cycle.p50 >= 0.05
    ? { value: r.cycle.p50 / floor.cycle.p50, mean: false }
    : { value: floor.perSecond / r.perSecond, mean: true };
}

/**
 * Each of our contended rows beside each peer's row on the same store, client count and hold: the
 * pairs the summary's "ours vs the peers" table and the headline compare.
 */
export function peerPairs(
  contended: ContendedResult[],
  subjects: Named[],
): { store: string; mine: ContendedResult; peer: ContendedResult }[] {
  const of = (name: string) => subjects.find((s) => s.name === name);
  return contended.flatMap((peer) => {
    const store = of(peer.subject)?.store;
    if (store === undefined || of(peer.subject)!.ours) return [];
    return contended
      .filter((m) => m.clients === peer.clients && m.holdMs === peer.holdMs && of(m.subject)?.ours && of(m.subject)?.store === store)
      .map((mine) => ({ store, mine, peer }));
  });
}

const x = (n: number) => `${n.toFixed(2)}×`;
const ms = (n: number) => (n >= 10 ? n.toFixed(1) : n.toFixed(3));

export function digest(input: DigestInput): { headline: string[]; glance: string[][]; charts: BarChart[] } {
  const subject = (name: string) => input.subjects.find((s) => s.name === name);
  const ours = (name: string) => subject(name)?.ours === true;
  const bar = (label: string, value: number, name: string): Bar => ({ label, value, kind: ours(name) ? 'ours' : 'other' });
  const headline: string[] = [];
  const charts: BarChart[] = [];

  // Scenario 1: every subject with a floor, as its ratio to that floor.
  const ratios = input.uncontended.flatMap((r) => {
    const floor = input.floorOf(r.subject);
    return floor && floor !== r ? [{ r, ...floorRatio(r, floor) }] : [];
  });
  // Tracing's rows are left out of the charts: their cost is the summary's table of its own.
  const traced = (name: string) => name.includes('@deadbolt/otel');
  charts.push({
    title: "Scenario 1: uncontended lock + release, over the store's floor (lower is better)",
    bars: ratios.filter(({ r }) => !traced(r.subject)).map(({ r, value }) => bar(r.subject, value, r.subject)),
    unit: '×',
    reference: 1,
  });
  const ourRatios = ratios.filter(({ r }) => ours(r.subject) && !traced(r.subject));
  if (ourRatios.length > 0) {
    const sorted = [...ourRatios].sort((a, b) => a.value - b.value);
    const [best, worst] = [sorted[0]!, sorted.at(-1)!];
    headline.push(
      `Uncontended, deadbolt's lock + release costs ${x(best.value)} to ${x(worst.value)} the store's own minimal round trips ` +
        `(${best.r.subject} the closest, ${worst.r.subject} the furthest).`,
    );
  }

  // Throughput charts leave memory out when a real store ran: in-process, it is hundreds of times
  // off their scale (its numbers are in the tables).
  const realStores = input.subjects.some((s) => s.store !== 'memory' && input.uncontended.some((r) => r.subject === s.name));
  const scaled = <R extends { subject: string }>(rows: R[]) =>
    realStores ? rows.filter((r) => subject(r.subject)?.store !== 'memory') : rows;
  const memoryOut = realStores ? ' (memory in the tables)' : '';
  // Scenario 3: holds per second at each client count, ours beside the peers.
  const counts = [...new Set(input.contended.filter((r) => r.holdMs === 1).map((r) => r.clients))];
  for (const clients of counts) {
    const rows = input.contended.filter((r) => r.clients === clients && r.holdMs === 1);
    charts.push({
      title: `Scenario 3: contended handoff, ${clients} clients, 1 ms hold: holds per second${memoryOut}`,
      bars: scaled(rows).map((r) => bar(r.subject, r.holdsPerSecond, r.subject)),
    });
  }
  // Ours over each peer on the same store and client count, as one range per store.
  const versus = new Map<string, number[]>();
  for (const { store, mine, peer } of peerPairs(input.contended, input.subjects)) {
    versus.set(store, [...(versus.get(store) ?? []), mine.holdsPerSecond / peer.holdsPerSecond]);
  }
  if (versus.size > 0) {
    const ranges = [...versus].map(([store, r]) => `${store} ${x(Math.min(...r))}–${x(Math.max(...r))}`);
    headline.push(
      `Contended, deadbolt's holds per second over the peer libraries' on the same server: ${ranges.join(', ')} (every client count and peer setting).`,
    );
  }
  const checked = input.contended.filter((r) => r.tokenOrderViolations !== undefined);
  if (checked.length > 0) {
    const grants = checked.reduce((n, r) => n + r.acquisitions.length, 0);
    const violations = checked.reduce((n, r) => n + (r.tokenOrderViolations ?? 0), 0);
    headline.push(
      `${grants} contended grants checked: ${violations === 0 ? 'every fencing token above the one before it' : `${violations} fencing tokens out of order`}.`,
    );
  }

  charts.push({
    title: `Scenario 4: many keys, 200 workers over 10 000 keys: acquisitions per second${memoryOut}`,
    bars: scaled(input.manyKeys).map((r) => bar(r.subject, r.perSecond, r.subject)),
  });
  charts.push({
    title: "Scenario 6: a migration's dual phase, over the sum of both stores' cycles (p50)",
    bars: input.migration.map((m) => ({ label: m.pair, value: m.dual.cycle.p50 / (m.from.cycle.p50 + m.to.cycle.p50), kind: 'ours' })),
    unit: '×',
    reference: 1,
  });
  charts.push({
    title: `Scenario 7: semaphore, 16 clients: holds per second${memoryOut}`,
    bars: scaled(input.semaphore).map((r) => bar(r.subject, r.holdsPerSecond, r.subject)),
  });
  charts.push({
    title: `Scenario 8: read-heavy read-write lock, 16 clients: holds per second${memoryOut}`,
    bars: scaled(input.readWrite).map((r) => bar(r.subject, r.holdsPerSecond, r.subject)),
  });
  const aborts = input.longHolds.filter((r) => r.lossToAbort);
  charts.push({
    title: 'Scenario 5: a lost lease to lock.signal aborting, p50 ms (lower is better)',
    bars: aborts.map((r) => bar(r.subject, r.lossToAbort!.p50, r.subject)),
    unit: ' ms',
  });
  const lostWhileHeld = input.longHolds.reduce((n, r) => n + r.lostWhileHeld, 0);
  if (input.longHolds.length > 0)
    headline.push(
      `Long holds: ${lostWhileHeld === 0 ? 'no lock was lost while held' : `${lostWhileHeld} locks lost while held`}; ` +
        `a lost lease aborted its signal after ${ms(Math.min(...aborts.map((r) => r.lossToAbort!.p50)))}–${ms(Math.max(...aborts.map((r) => r.lossToAbort!.p50)))} ms (p50 by store).`,
    );
  if (input.failures.length > 0) headline.push(`${input.failures.length} step(s) failed: see "Steps that failed" at the end.`);

  // At a glance: per store, our best row against its floor and its peers.
  const glance: string[][] = [
    ['store', 'deadbolt, uncontended p50', 'floor p50', 'over the floor', 'contended holds/s (most clients)', 'peers, same test'],
  ];
  const stores = [...new Set(input.uncontended.map((r) => subject(r.subject)?.store).filter((s): s is string => s !== undefined))];
  for (const store of stores) {
    const mine = ratios.filter(({ r }) => ours(r.subject) && subject(r.subject)?.store === store && !traced(r.subject));
    const first = mine[0];
    if (!first) continue;
    const floor = input.floorOf(first.r.subject)!;
    const most = Math.max(0, ...input.contended.filter((r) => subject(r.subject)?.store === store && r.holdMs === 1).map((r) => r.clients));
    const contended = input.contended.filter((r) => subject(r.subject)?.store === store && r.clients === most && r.holdMs === 1);
    const show = (rows: ContendedResult[]) => rows.map((r) => `${r.subject} ${Math.round(r.holdsPerSecond)}`).join(', ') || 'none';
    glance.push([
      store,
      mine.map(({ r }) => `${r.subject} ${ms(r.cycle.p50)} ms`).join(', '),
      `${ms(floor.cycle.p50)} ms`,
      mine
        .map(
          ({ r, value, mean }) =>
            `${x(value)}${mean ? ' (mean)' : ''}${mine.length > 1 ? ` ${r.subject.replace(/^deadbolt \S+ ?/, '') || 'default'}` : ''}`,
        )
        .join(', '),
      most ? `${show(contended.filter((r) => ours(r.subject)))} (${most} clients)` : 'n/a',
      show(contended.filter((r) => !ours(r.subject))),
    ]);
  }
  return { headline, glance, charts: charts.filter((c) => c.bars.length > 0) };
}
