#!/usr/bin/env node
/**
 * `pnpm bench [--full] [--only redis,memory] [--scenarios 1,3,4] [--thesis N] [--raw]`: the scenarios the bench README describes, on
 * every deadbolt backend whose store answers (memory always) and on the peers, same servers, one
 * run: 1 uncontended cycle vs the store's floor, 2 the thesis experiment (real processes), 3
 * contended handoff, 4 many keys (Zipf), 5 long holds (renewal traffic, loss → abort), 6 the cost of a migration's dual phase,
 * 7 a contended semaphore, 8 a read-heavy read-write lock, 9 a fenced write beside a plain one, 11 elections and runOnce, 10 scenarios
 * 1 and 4 again beside a CPU-burning neighbour (a busy host), 12 held locks per process from 10 to 100 000 (10 and 12: with --full,
 * or when --scenarios names them). Writes
 * bench-results/<time>/{results.json, summary.md, report.html}. One long file: the order of
 * the run (which subjects, interleaved how) and each scenario's table, in the order the report has.
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { cpus, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  contendedResult,
  interleave,
  longHolds,
  manyKeysResult,
  openContended,
  openManyKeys,
  STRAGGLER_GRACE_MS,
  thesis,
  uncontended,
  type Acquisition,
  type ContendedResult,
  type ContendedSegment,
  type Session,
  type LongHoldResult,
  type ManyKeysResult,
  type ThesisResult,
  type UncontendedEntry,
  type UncontendedResult,
} from './scenarios.js';
import { electionCost, electionLines, electionStores, type ElectionResult } from './elections.js';
import { fenceCost, fenceCostLines, fenceStores, type FenceCostResult } from './fences.js';
import { heldCurve, heldLines, type HeldPoint } from './scale.js';
import { waitersCurve, waitersLines, type WaitersPoint } from './waiters.js';
import { summarize } from './stats.js';
import { renderReport } from './report.js';
import { digest, floorRatio, peerPairs } from './digest.js';
import { besideBusyNeighbour } from './neighbour.js';
import { openProbe, type StoreProbe } from './stores.js';
import { clock, describeLoad, sampleLoad, scenarioOf, stepMeans, TimeLeft } from './progress.js';
import {
  deadlineSubjects,
  floors,
  migrationPairs,
  sharedSubjects,
  subjects,
  tracedSubjects,
  clientSubjects,
  type Store,
  type Subject,
} from './subjects.js';

const usage = 'usage: pnpm bench [--full] [--only redis,memory] [--scenarios 1,3,4] [--thesis N] [--raw]';
let args: ReturnType<typeof parseCli>;
/** The command line; an unknown option or a bad value ends the run before anything starts. */
function parseCli() {
  return parseArgs({
    options: {
      full: { type: 'boolean' },
      only: { type: 'string' },
      scenarios: { type: 'string' },
      thesis: { type: 'string' },
      raw: { type: 'boolean' },
      help: { type: 'boolean' },
    },
    allowPositionals: false,
  }).values;
}
try {
  args = parseCli();
  if (args.thesis !== undefined && !(Number.isInteger(Number(args.thesis)) && Number(args.thesis) > 0))
    throw new Error('--thesis needs a positive integer');
} catch (error) {
  console.error(`${(error as Error).message}\n${usage}`);
  process.exit(2);
}
if (args.help) {
  console.log(usage);
  process.exit(0);
}
const full = args.full === true;
/** Every timed sample in results.json too (scenario 1's cycles, scenarios 3 and 4's acquisitions): tens of MB. */
const raw = args.raw === true;
const loadAtStart = sampleLoad();
const only = args.only?.split(',').map((s) => s.trim());
const chosen = args.scenarios?.split(',').map((s) => s.trim());
/**
 * Whether scenario `n` runs: those --scenarios names; without it, all of them, except that the busy
 * host (10, scenarios 1 and 4 a second time) and the held-locks curve (12) are left to --full to keep
 * the quick run near ten minutes.
 */
const runs = (n: number) => (chosen ? chosen.includes(String(n)) : (n !== 10 && n !== 12 && n !== 13) || full);
const SCENARIOS = ['1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13'];
/** Scenario 12's counts of held locks. */
const heldCounts = full ? [10, 100, 1000, 10_000, 100_000] : [10, 100, 1000, 10_000];
/** Scenario 13's counts of waiters on one key, and how long each count's handoffs are timed. */
const waiterCounts = [1, 10, 100, 1000];
const handoffMs = full ? 10_000 : 3000;
const cycles = full ? 5000 : 2000;
const durationMs = full ? 10_000 : 3000;
// 16: the semaphore and read-write rows' own count (scenarios 7 and 8 are set against the mutex there).
const clientCounts = full ? [2, 8, 16, 32] : [2, 8];
const holdMs = full ? 60_000 : 4000;
// The discarded warm-up before a store's subjects are timed in scenarios 3, 4, 7 and 8 (the quick
// profile's is shorter to keep the whole run within ten minutes with every store up).
const warmMs = full ? 1000 : 500;
// The thesis ran 5000 per process; the polling stores need minutes per 1000 at 5 processes.
const thesisCount = args.thesis !== undefined ? Number(args.thesis) : full ? 1000 : 100;

const f = (n: number, digits = 2) => n.toFixed(digits);
const describe = (error: unknown) =>
  error instanceof Error
    ? `${error.message}${error.cause instanceof Error && !error.message.includes(error.cause.message) ? ` (${error.cause.message})` : ''}`
    : String(error);
const optional = (n: number | undefined, digits = 2) => (n === undefined ? 'n/a' : f(n, digits));

/** The installed version of a client library, read from its package.json. */
function libraryVersion(name: string): string {
  const require = createRequire(import.meta.url);
  for (let dir = dirname(require.resolve(name)); dir !== dirname(dir); dir = dirname(dir)) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === name) return `${name} ${pkg.version}`;
    } catch {
      /* keep walking up */
    }
  }
  return `${name} (version unknown)`;
}

const all = subjects();
const known = [...new Set(all.map((s) => s.store))];
// A misspelt store or scenario would otherwise run nothing and print empty tables.
for (const [flag, given, valid] of [
  ['--only', only, known],
  ['--scenarios', chosen, SCENARIOS],
] as const) {
  const wrong = given?.filter((value) => !(valid as readonly string[]).includes(value)) ?? [];
  if (given && (wrong.length > 0 || given.length === 0)) {
    console.error(
      `${flag}: unknown ${wrong.map((w) => JSON.stringify(w)).join(', ') || 'empty list'}; choose from ${valid.join(', ')}\n${usage}`,
    );
    process.exit(2);
  }
}
const stores = known.filter((store) => !only || only.includes(store));
const probes = new Map<Store, StoreProbe>();
const versions = new Map<Store, string>();
/** Stores left out because they did not answer, with the error that said so. */
const leftOut = new Map<Store, string>();
for (const store of stores) {
  // A store is benchmarked when deadbolt's own backend can take a lock on it.
  const client = await all.find((s) => s.store === store && s.backend)!.client();
  const failed = await client.acquire(`bench:probe:${process.pid}`).then(
    async (held) => void (await held.release()),
    (error: unknown) => describe(error),
  );
  await client.close().catch(() => undefined);
  if (failed !== undefined) {
    leftOut.set(store, failed);
    continue;
  }
  const probe = await openProbe(store);
  probes.set(store, probe);
  versions.set(store, await probe.version());
}
console.error(`[bench] stores: ${[...probes.keys()].join(', ')}${only ? ` (--only ${only.join(',')})` : ''}`);
for (const [store, why] of leftOut) console.error(`[bench] left out ${store}: ${why}`);
const available = all.filter((s) => probes.has(s.store));
const ours = available.filter((s) => s.backend);
const traced = tracedSubjects().filter((s) => probes.has(s.store));
const deadlined = deadlineSubjects().filter((s) => probes.has(s.store));
const onClients = clientSubjects().filter((s) => probes.has(s.store));
const thesisSubjects = ours.filter((s) => s.store !== 'memory');
const SEMAPHORE_LIMIT = 4;
const SHARED_CLIENTS = 16;
const READ_SHARE = 0.9;
const shared = sharedSubjects(SEMAPHORE_LIMIT, READ_SHARE);
const semaphoreSubjects = shared.semaphores.filter((s) => probes.has(s.store));
const readWriteSubjects = shared.readWrite.filter((s) => probes.has(s.store));
const up = stores.filter((store) => probes.has(store));
/** Scenario 12: each store's default deadbolt subject (the first of the store's; Cassandra's queue). */
const scaleSubjects = up.flatMap((store) => ours.filter((s) => s.store === store && s.store !== 'redlock').slice(0, 1));
const storesWith = (list: Subject[]) => new Set(list.map((s) => s.store)).size;
const mostPerStore = Math.max(0, ...up.map((store) => thesisSubjects.filter((s) => s.store === store).length));
// One progress step per interleaved group (a store's subjects in one scenario and setting), for
// the scenarios that run.
const planned = new Map<number, number>(
  (
    [
      [1, up.length],
      [3, up.length * clientCounts.length + (probes.has('memory') ? clientCounts.length : 0)],
      [4, up.length],
      [10, up.length * 2],
      [7, storesWith(semaphoreSubjects)],
      [8, storesWith(readWriteSubjects)],
      [6, migrationPairs().filter((p) => probes.has(p.from.store) && probes.has(p.to.store)).length],
      [5, mostPerStore],
      [9, up.filter((store) => fenceStores.includes(store)).length],
      [11, up.filter((store) => electionStores.includes(store)).length],
      [2, thesisSubjects.length * 3],
      [12, scaleSubjects.length],
      [13, scaleSubjects.length],
    ] as [number, number][]
  ).filter(([n, steps]) => runs(n) && steps > 0),
);
const steps = [...planned.values()].reduce((a, b) => a + b, 0);
let done = 0;
const startedAt = performance.now();
/** When each step started (seconds into the run), kept in results.json: what makes a run long. */
const timeline: [startedS: number, step: string][] = [];
const resultsRoot = join(process.env.INIT_CWD ?? process.cwd(), 'bench-results');
/**
 * The mean length of each scenario's steps in the last run of the same profile in bench-results/,
 * from its results.json's timeline: what the time left is guessed from for a scenario this run has
 * not begun (see `TimeLeft`). Empty when there is none.
 */
function lastStepMeans(): Map<number, number> {
  try {
    for (const run of readdirSync(resultsRoot).sort().reverse()) {
      const saved = JSON.parse(readFileSync(join(resultsRoot, run, 'results.json'), 'utf8')) as {
        full?: boolean;
        timeline?: [number, string][];
      };
      if (saved.full === full && saved.timeline?.length) return stepMeans(saved.timeline);
    }
  } catch {
    /* no earlier run here */
  }
  return new Map();
}
const timeLeft = new TimeLeft(planned, lastStepMeans());
/** At least this often a progress line while a step runs (seconds; the tests shorten it). */
const HEARTBEAT_S = Number(process.env.DEADBOLT_BENCH_HEARTBEAT_MS ?? 5000) / 1000;
/** What runs now, and since when (seconds into the run): for the progress line and the heartbeat. */
let current: { text: string; at: number } | undefined;
let lastLineAt = 0;
/** The progress line: steps done, time so far, the time left where it can be told, and what runs now. */
function status(elapsed: number, beat: boolean): string {
  const estimate = timeLeft.left(elapsed);
  const left = estimate !== undefined ? `, about ${clock(estimate)} left` : '';
  const inStep = beat && current ? ` (${clock(elapsed - current.at)} in this step)` : '';
  return `${Math.min(done, steps)}/${steps}, ${clock(elapsed)}${left}: ${current?.text ?? ''}${inStep}`;
}
/** `beat`: a heartbeat's line (the step goes on), which says how long the step has run. */
function show(elapsed: number, beat = false): void {
  lastLineAt = elapsed;
  const line = status(elapsed, beat);
  if (process.stderr.isTTY) {
    const width = 20;
    const filled = Math.round((width * (done - 1)) / Math.max(1, steps));
    process.stderr.write(
      `\r\x1b[K[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${line.slice(0, (process.stderr.columns || 100) - width - 4)}`,
    );
  } else {
    process.stderr.write(`[bench] ${line}\n`);
  }
}
/**
 * Progress on stderr, a line when a step begins: redrawn in place on a terminal, a line each
 * otherwise (CI, `| tee`). And at least every 5 s while a step runs (the heartbeat below, with the
 * time spent in the step), so a long step never looks like a hang.
 */
const progress = (text: string) => {
  const elapsed = (performance.now() - startedAt) / 1000;
  timeline.push([Math.round(elapsed * 1000) / 1000, text || 'done']);
  timeLeft.begin(text === '' ? undefined : scenarioOf(text), elapsed);
  if (text === '') {
    clearInterval(heartbeat);
    return void process.stderr.write(process.stderr.isTTY ? '\r\x1b[K' : `[bench] done in ${clock(elapsed)}\n`);
  }
  done++;
  current = { text, at: elapsed };
  show(elapsed);
};
// Checked every fifth of the heartbeat, a line is due a check early: so none is later than HEARTBEAT_S.
const HEARTBEAT_CHECK_S = HEARTBEAT_S / 5;
const heartbeat = setInterval(() => {
  const elapsed = (performance.now() - startedAt) / 1000;
  if (current && elapsed - lastLineAt >= HEARTBEAT_S - HEARTBEAT_CHECK_S) show(elapsed, true);
}, HEARTBEAT_CHECK_S * 1000);
heartbeat.unref();
const failures: string[] = [];
/** Runs one step of the run; a step that fails is reported in the summary and the run goes on. */
async function step<T>(label: string, run: () => Promise<T>, into: T[]): Promise<void> {
  progress(label);
  try {
    into.push(await run());
  } catch (error) {
    failures.push(`${label}: ${describe(error)}`);
  }
}
/**
 * Scenario 1 for one store: its floor, our backends and the peers, interleaved (see `uncontended`).
 * Every client is closed whatever happens; one that fails is reported and the others go on.
 */
async function uncontendedOn(store: Store): Promise<UncontendedResult[]> {
  const subjects = [...available, ...traced, ...deadlined, ...onClients].filter((s) => s.store === store);
  const ownFloors = subjects.flatMap((s) => (s.floor ? [s.floor] : []));
  const wanted = [
    ...[floors[store], ...ownFloors].flatMap((floor) => (floor ? [{ name: floor.name, make: floor.client }] : [])),
    ...subjects.map((s) => ({ name: s.name, make: s.client })),
  ];
  const opened: UncontendedEntry[] = [];
  try {
    for (const { name, make } of wanted) {
      try {
        opened.push({ name, client: await make(), cycles: store === 'memory' ? cycles * 50 : cycles });
      } catch (error) {
        failures.push(`scenario 1: ${name}: ${describe(error)}`);
      }
    }
    const { results, failures: failed } = await uncontended(opened, probes.get(store));
    for (const { name, error } of failed) failures.push(`scenario 1: ${name}: ${describe(error)}`);
    return results;
  } finally {
    await Promise.allSettled(opened.map((entry) => entry.client.close()));
  }
}

const uncontendedResults: UncontendedResult[] = [];
for (const store of stores.filter((s) => runs(1) && probes.has(s))) {
  progress(`scenario 1: ${store}, floor, ours and peers interleaved`);
  uncontendedResults.push(...(await uncontendedOn(store)));
}
/** Scenario 6: per pair, each store alone and the two in `dual`, interleaved like scenario 1. */
const migrationResults: {
  pair: string;
  from: UncontendedResult;
  to: UncontendedResult;
  nested: UncontendedResult;
  dual: UncontendedResult;
}[] = [];
for (const pair of migrationPairs().filter((p) => runs(6) && probes.has(p.from.store) && probes.has(p.to.store))) {
  progress(`scenario 6: ${pair.dual.name}`);
  const opened: UncontendedEntry[] = [];
  try {
    for (const subject of [pair.from, pair.to, pair.nested, pair.dual]) {
      opened.push({ name: subject.name, client: await subject.client(), cycles: subject.store === 'memory' ? cycles * 10 : cycles });
    }
    const { results, failures: failed } = await uncontended(opened);
    for (const { name, error } of failed) failures.push(`scenario 6: ${name}: ${describe(error)}`);
    const [from, to, nested, dual] = [pair.from, pair.to, pair.nested, pair.dual].map((s) => results.find((r) => r.subject === s.name));
    if (from && to && nested && dual) migrationResults.push({ pair: pair.dual.name, from, to, nested, dual });
  } catch (error) {
    failures.push(`scenario 6: ${pair.dual.name}: ${describe(error)}`);
  } finally {
    await Promise.allSettled(opened.map((entry) => entry.client.close()));
  }
}
/**
 * Scenarios 3, 4, 7 and 8 run a store's subjects interleaved: `rounds` segments each, round-robin
 * (see `interleave`), so ours and the peers on one store are timed in the same machine states.
 */
const rounds = full ? 10 : 3;
async function interleaved<S, R>(
  label: string,
  group: Subject[],
  open: (subject: Subject) => Promise<Session<S>>,
  result: (subject: Subject, segments: S[]) => R,
  into: R[],
): Promise<void> {
  if (!group.length) return;
  progress(`${label}: ${group.map((s) => s.name).join(', ')}`);
  const { results, failures: failed } = await interleave(
    group.map((subject) => ({ name: subject.name, open: () => open(subject) })),
    rounds,
  );
  for (const { name, error } of failed) failures.push(`${label}: ${name}: ${describe(error)}`);
  for (const { name, segments } of results)
    into.push(
      result(
        group.find((s) => s.name === name)!,
        segments,
      ),
    );
}
const contendedResults: ContendedResult[] = [];
for (const store of up.filter(() => runs(3))) {
  for (const clients of clientCounts) {
    const group = available.filter((s) => s.store === store && clients <= (s.livelocksAbove?.clients ?? Infinity));
    const rows = (holdMs: number) => (subject: Subject, segments: ContendedSegment[]) =>
      contendedResult(subject.name, clients, holdMs, segments);
    await interleaved(
      `scenario 3, ${clients} clients`,
      group,
      (s) => openContended(s, clients, 1, durationMs / rounds, warmMs),
      rows(1),
      contendedResults,
    );
    // In memory a 1 ms timer is the whole cost; also show the raw handoff rate (briefly: ~100k grants/s).
    if (store === 'memory')
      await interleaved(
        `scenario 3, ${clients} clients, hold 0`,
        group,
        (s) => openContended(s, clients, 0, 500 / rounds, 200),
        rows(0),
        contendedResults,
      );
  }
}
// Scenarios 7 and 8: the shared family under contention, with scenario 3's measurements.
const sharedRows = (subject: Subject, segments: ContendedSegment[]) => contendedResult(subject.name, SHARED_CLIENTS, 1, segments);
const semaphoreResults: ContendedResult[] = [];
const readWriteResults: ContendedResult[] = [];
const sharedScenarios = [
  { scenario: 7, subjects: semaphoreSubjects, into: semaphoreResults },
  { scenario: 8, subjects: readWriteSubjects, into: readWriteResults },
] as const;
for (const store of up)
  for (const { scenario, subjects, into } of sharedScenarios)
    await interleaved(
      `scenario ${scenario}, ${SHARED_CLIENTS} clients`,
      subjects.filter((s) => runs(scenario) && s.store === store),
      (s) => openContended(s, SHARED_CLIENTS, 1, durationMs / rounds, warmMs),
      sharedRows,
      into,
    );
/** Scenario 4 on one store's subjects (those that do not livelock), interleaved. */
const manyKeysOn = (store: Store, label: string, into: ManyKeysResult[]) =>
  interleaved(
    label,
    available.filter((s) => s.store === store && !s.livelocksAbove),
    (s) => openManyKeys(s, 200, 10_000, 20, durationMs / rounds, probes.get(store)!, warmMs),
    (s, segments) => manyKeysResult(s.name, 200, 10_000, segments),
    into,
  );
const manyKeysResults: ManyKeysResult[] = [];
for (const store of up.filter(() => runs(4))) await manyKeysOn(store, 'scenario 4, 200 workers over 10 000 keys', manyKeysResults);
// Scenario 10: scenarios 1 and 4 again, each store's group beside a neighbour that keeps a core busy.
const busyUncontendedResults: UncontendedResult[] = [];
const busyManyKeysResults: ManyKeysResult[] = [];
/** Long enough for the slowest group here (scenario 1 on a polling store, a quick run's cycles); it ends sooner if the group does. */
const NEIGHBOUR_LIMIT_MS = 15 * 60_000;
for (const store of up.filter(() => runs(10))) {
  const label = `scenario 10: ${store}, scenario 1 beside a busy neighbour`;
  await besideBusyNeighbour(NEIGHBOUR_LIMIT_MS, async () => {
    progress(label);
    busyUncontendedResults.push(...(await uncontendedOn(store)));
  }).catch((error: unknown) => void failures.push(`${label}: ${describe(error)}`));
  await besideBusyNeighbour(NEIGHBOUR_LIMIT_MS, () =>
    manyKeysOn(store, 'scenario 10, scenario 4 beside a busy neighbour', busyManyKeysResults),
  ).catch((error: unknown) => void failures.push(`scenario 10: ${store}: ${describe(error)}`));
}
/**
 * Scenario 5 is mostly idle (renewals every ttl / 3): one subject of every store at a time, all at
 * once, so the subjects share machine states and the run takes a few hold times, not one each.
 * Subjects of one store never overlap: the store's request counter is per subject.
 */
const longHoldResults: LongHoldResult[] = [];
const waves: Subject[][] = [];
for (const store of up) thesisSubjects.filter((s) => runs(5) && s.store === store).forEach((s, i) => (waves[i] ??= []).push(s));
for (const wave of waves) {
  progress(`scenario 5: ${wave.map((s) => s.name).join(', ')}: 5 locks held ${holdMs / 1000} s`);
  const settled = await Promise.allSettled(wave.map((subject) => longHolds(subject, 5, holdMs, probes.get(subject.store)!)));
  settled.forEach((r, i) =>
    r.status === 'fulfilled' ? longHoldResults.push(r.value) : failures.push(`scenario 5: ${wave[i]!.name}: ${describe(r.reason)}`),
  );
}
const heldResults: HeldPoint[][] = [];
for (const subject of scaleSubjects.filter(() => runs(12))) {
  await step(
    `scenario 12: ${subject.name}, held ${heldCounts.join(', ')}`,
    () => heldCurve(subject, heldCounts, probes.get(subject.store)!),
    heldResults,
  );
}
const waiterResults: WaitersPoint[][] = [];
for (const subject of scaleSubjects.filter(() => runs(13))) {
  await step(
    `scenario 13: ${subject.name}, ${waiterCounts.join(', ')} waiting on one key`,
    () => waitersCurve(subject, waiterCounts, handoffMs, probes.get(subject.store)!),
    waiterResults,
  );
}
const fenceResults: FenceCostResult[] = [];
const fenceWrites = full ? 4000 : 1000;
for (const store of up.filter((store) => runs(9) && fenceStores.includes(store))) {
  await step(
    `scenario 9: ${store}: ${fenceWrites} plain and ${fenceWrites} fenced writes`,
    () => fenceCost(store, fenceWrites, rounds),
    fenceResults,
  );
}
const electionResults: ElectionResult[] = [];
// Each failover waits out a 4 s ttl: two per store in the quick run.
// A :00 is 200 calls, the fleet the scale goals name, in either profile.
const [elections, failovers, jobCalls, burstCalls] = full ? [500, 10, 2000, 200] : [50, 2, 200, 200];
for (const store of up.filter((store) => runs(11) && electionStores.includes(store))) {
  await step(
    `scenario 11: ${store}: ${elections} handovers, ${failovers} failovers, ${jobCalls} runOnce calls`,
    () => electionCost(store, elections, failovers, jobCalls, burstCalls),
    electionResults,
  );
}
const thesisResults: ThesisResult[] = [];
for (const subject of thesisSubjects.filter(() => runs(2))) {
  for (const processes of [1, 3, 5]) {
    await step(
      `scenario 2: ${subject.name}, ${processes} processes × ${thesisCount}`,
      () => thesis(subject, processes, thesisCount),
      thesisResults,
    );
  }
}
progress('');

/**
 * Scenario 1's variant rows (a subject run with something added: tracing, deadlines) beside the
 * rows they vary (`baseName` of a variant's name): what the addition costs per cycle. `intro`
 * says what the variants are.
 */
function costTable(variants: Subject[], baseName: (name: string) => string, intro: string[]): void {
  const pairs = variants.flatMap((v) => {
    const on = uncontendedResults.find((r) => r.subject === v.name);
    const off = uncontendedResults.find((r) => r.subject === baseName(v.name));
    return on && off ? [{ on, off }] : [];
  });
  if (pairs.length === 0) return;
  lines.push(
    '',
    ...intro,
    '',
    '| subject | p50 without → with | cost per cycle (p50) | client CPU µs per cycle without → with |',
    '|---|---|---|---|',
    ...pairs.map(
      ({ on, off }) =>
        `| ${off.subject} | ${f(off.cycle.p50, 3)} → ${f(on.cycle.p50, 3)} ms | ${f((on.cycle.p50 - off.cycle.p50) * 1000, 1)} µs (${f(on.cycle.p50 / off.cycle.p50)}×) | ${f(off.clientCpuUs, 1)} → ${f(on.clientCpuUs, 1)} |`,
    ),
  );
}

/** Every subject by name and store; ours are named "deadbolt …" (floors and peers are not). */
const named = [...all, ...traced, ...deadlined, ...onClients, ...shared.semaphores, ...shared.readWrite].map((s) => ({
  name: s.name,
  store: s.store,
  ours: s.name.startsWith('deadbolt '),
}));
/** The floor row of `subject`'s store among `rows` (scenario 1's, or scenario 10's busy ones). */
const floorOf = (subject: string, rows = uncontendedResults) => {
  const found = [...all, ...traced, ...deadlined, ...onClients].find((s) => s.name === subject);
  const name = found && (found.floor ?? floors[found.store])?.name;
  return rows.find((r) => r.subject === name);
};
const CLIENT_CPU_NOTE =
  'Client CPU: user + system time of this benchmark process over the timed blocks, per operation (for memory it includes the store).';
/** `r`'s p50 over its floor's, "(mean)" where the floor is below the clock's resolution (see `floorRatio`). */
const floorRatioText = (r: UncontendedResult, floor: UncontendedResult | undefined) =>
  floor ? ((q) => `${f(q.value)}×${q.mean ? ' (mean)' : ''}`)(floorRatio(r, floor)) : '';
const libraries = [
  'ioredis',
  'mysql2',
  'pg',
  'etcd3',
  'node-zookeeper-client',
  'cassandra-driver',
  'redis-semaphore',
  '@sesamecare-oss/redlock',
  'hdr-histogram-js',
].map(libraryVersion);
const machine =
  `Machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB; Node ${process.version}; profile ${full ? 'full' : 'quick'}. ` +
  `Stores: ${stores.map((s) => (probes.has(s) ? versions.get(s) : `${s} not running (skipped)`)).join(', ')}. Client libraries: ${libraries.join(', ')}.`;
/** The machine's load over the run: beside every ratio, which a busy machine bends. */
const load = describeLoad(loadAtStart, sampleLoad());
const loadNote = `The machine over this run: ${load}.`;
const lines: string[] = [];
lines.push('# deadbolt benchmark', '', machine, loadNote, '');
lines.push(
  'All subjects ran in this one process (scenario 2: in forked processes), on the same servers, with the same client libraries; every',
  "timed phase follows a discarded warm-up. A store's subjects (its floor, our backends, the peers) run interleaved in scenarios 1, 3, 4,",
  `6, 7 and 8, round-robin (scenarios 1 and 6: 10 blocks of each row's cycles; 3, 4, 7, 8: ${rounds} segments of each row's time), so a`,
  "drift in the machine's speed reaches them alike;",
  'scenario 5 holds one subject of every store at once; scenario 2 runs each subject alone (its point is what builds up over one long',
  'run, which segments would cut short). Locks are taken with a 10 s ttl except in scenario 5. Store requests come',
  "from each server's own counter (Redis INFO commandstats: every command, including those a Lua script runs; MySQL Questions; etcd",
  'gRPC messages received; ZooKeeper packets received; Cassandra native-transport requests) and include background traffic (renewals,',
  'pings, the Cassandra time service).',
  '',
);
/** p50 of the last tenth of `cycleMs` over the first tenth's. */
function drift(cycleMs: number[]): number {
  const tenth = Math.max(1, Math.floor(cycleMs.length / 10));
  return summarize(cycleMs.slice(-tenth)).p50 / summarize(cycleMs.slice(0, tenth)).p50;
}

/** What a scenario that needs a real store says when none ran: none was chosen, or none answered (named above the tables). */
const noStore = !stores.some((store) => store !== 'memory')
  ? `_Not run: these scenarios need a real store, and \`--only ${only?.join(',')}\` named none._`
  : `_Not run: these scenarios need a real store, and none answered (left out: ${[...leftOut.keys()].join(', ')}; \`bash scripts/bench.sh\` starts them)._`;
if (runs(1)) {
  lines.push(
    '## Scenario 1: uncontended acquire + release',
    '',
    loadNote,
    "A store's floor, our backends and the peers run interleaved: 10 rounds, each subject timing a tenth of its cycles per round with its",
    "own open client, so a drift in the machine's speed (loopback round trips here vary several-fold between an idle and a busy machine)",
    "slows them all alike. Idle background traffic of the store's other open clients (ZooKeeper pings, the Cassandra time service) falls",
    'into whichever block runs: a few requests per thousand cycles.',
    "Drift is the p50 of the last tenth of a subject's cycles over its first tenth, all on one key: a store whose cost grows with use",
    "(tombstones, for one) shows it there; the floor's drift is the machine's.",
    CLIENT_CPU_NOTE,
    '',
  );
  lines.push(
    '| subject | cycles | cycles/s | p50 ms | p99 ms | overhead vs floor (p50) | drift (last/first tenth, p50) | store requests per cycle | client CPU µs per cycle |',
    '|---|---|---|---|---|---|---|---|---|',
  );
  for (const r of uncontendedResults) {
    const ratio = floorRatioText(r, floorOf(r.subject));
    lines.push(
      `| ${r.subject} | ${r.cycles} | ${Math.round(r.perSecond)} | ${f(r.cycle.p50, 3)} | ${f(r.cycle.p99, 3)} | ${ratio} | ${f(drift(r.cycleMs))}× | ${optional(r.storeRequestsPerCycle, 1)} | ${f(r.clientCpuUs, 1)} |`,
    );
  }
  costTable(traced, (name) => name.replace(/ \+ @deadbolt\/otel$/, ''), [
    "Tracing: a `… + @deadbolt/otel` row is the row above it with `instrumentDeadbolt()` subscribed to deadbolt's channels during",
    "its own blocks only (the OpenTelemetry SDK's tracer and meter providers, nothing exported); every other row runs with no",
    'subscriber, where deadbolt builds and publishes no event. What recording every call costs, per cycle:',
  ]);
  costTable(onClients, (name) => name.replace(/ on \w+$/, ''), [
    'Clients: a `deadbolt … on <client>` row is our backend on a client library other than its default, and its overhead above is',
    "counted against a floor on that same library (`… floor on <client>`), so the client's own cost does not count as ours. What",
    'the client choice costs against the default client, per cycle:',
  ]);
  costTable(deadlined, (name) => name.replace(/ on deadbolt's connections?$/, ''), [
    "Deadlines: an `… on deadbolt's connection` row is the peer row of that name on the ioredis clients a deadbolt backend opens for",
    'itself: every command fails after the command timeout (5 s) and a connection silent that long is replaced, so no call waits for',
    "ever on a store gone silent; ioredis arms two timers per command for that. The peers' own rows use plain clients, which would",
    'wait for ever; every deadbolt row pays for the deadlines. What they cost the peer, per cycle:',
  ]);
}
if (runs(6)) {
  lines.push(
    '',
    '## Scenario 6: migration cost (uncontended acquire + release in `dual`, against each store alone)',
    '',
    loadNote,
    'Each store alone, both stores held one after the other by two plain lockers (what `dual` does, without the migration: no',
    'token floors, no wrapper), and the pair in `dual` (`migratingBackend`), interleaved as in scenario 1, each on its own key. The goal',
    "is a `dual` cycle within 1.1 × the sum of the two stores' own cycles. On a small machine whose stores share its cores, a store that",
    'waited while the other worked answers more slowly than one called back to back: the "both" column shows that cost, which any',
    'client holding two stores pays; "dual / both" is what the migration itself adds (a raise per grant where one store counts in revisions).',
    '',
    '| pair | from p50 ms | to p50 ms | sum | both p50 ms | dual p50 ms | dual / sum (p50) | dual / both (p50) | dual / sum (mean) |',
    '|---|---|---|---|---|---|---|---|---|',
  );
  for (const { pair, from, to, nested, dual } of migrationResults) {
    const sum = from.cycle.p50 + to.cycle.p50;
    const mean = (r: UncontendedResult) => 1000 / r.perSecond;
    lines.push(
      `| ${pair} | ${f(from.cycle.p50, 3)} | ${f(to.cycle.p50, 3)} | ${f(sum, 3)} | ${f(nested.cycle.p50, 3)} | ${f(dual.cycle.p50, 3)} | ${f(dual.cycle.p50 / sum)}× | ` +
        `${f(dual.cycle.p50 / nested.cycle.p50)}× | ${f(mean(dual) / (mean(from) + mean(to)))}× |`,
    );
  }
  if (!migrationResults.length) lines.push('', '_No pair had both stores up._');
}
if (runs(3)) {
  lines.push(
    '',
    `## Scenario 3: contended handoff (1 ms critical section, ${durationMs / 1000} s per row; memory also with hold 0 for 0.5 s)`,
    '',
  );
  lines.push(
    '| subject | clients | hold ms | holds/s | wait p50 | wait p99 | wait max | handoffs to another client | handoff p50 | handoff p99 | Jain | token order violations |',
  );
  lines.push('|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of contendedResults) {
    const total = r.acquisitions.length;
    lines.push(
      `| ${r.subject} | ${r.clients} | ${r.holdMs} | ${Math.round(r.holdsPerSecond)} | ${f(r.wait.p50)} | ${f(r.wait.p99)} | ${f(r.wait.max)} | ` +
        `${r.handoffsToOther}/${total} (${Math.round((100 * r.handoffsToOther) / Math.max(1, total))} %) | ${f(r.handoff.p50)} | ${f(r.handoff.p99)} | ${f(r.jain, 3)} | ${r.tokenOrderViolations ?? 'no tokens'} |`,
    );
  }
  lines.push(
    '',
    'Times in ms. Wait = ask → granted. Handoff = previous holder starts releasing → next holder (a different client) granted.',
    '',
  );
  givenUp(contendedResults);
  for (const s of available.filter((s) => runs(3) && s.livelocksAbove && clientCounts.some((n) => n > s.livelocksAbove!.clients))) {
    lines.push(`Run with at most ${s.livelocksAbove!.clients} clients: ${s.name}: ${s.livelocksAbove!.reason}.`, '');
  }
  // Ours vs each peer on the same store and client count: holds/s and max wait as ratios.
  const peerRows = peerPairs(contendedResults, named).map(
    ({ mine, peer: r }) =>
      `| ${mine.subject} vs ${r.subject} | ${r.clients} | ${f(mine.holdsPerSecond / r.holdsPerSecond)}× | ${f(mine.handoff.p50)} / ${f(r.handoff.p50)} | ` +
      `${f(mine.handoff.p99)} / ${f(r.handoff.p99)} | ${f(mine.wait.max)} / ${f(r.wait.max)} | ${f(mine.jain, 3)} / ${f(r.jain, 3)} |`,
  );
  if (peerRows.length) {
    lines.push('### Ours vs the peers (same server, same client count)', '');
    lines.push(
      '| pair | clients | holds/s ours / peer | handoff p50 ms ours / peer | handoff p99 ms | wait max ms | Jain |',
      '|---|---|---|---|---|---|---|',
      ...peerRows,
      '',
    );
  }
}
/** Names the rows that gave up waits (see `STRAGGLER_GRACE_MS`): their wait columns are lower bounds. */
function givenUp(results: ContendedResult[]): void {
  for (const r of results.filter((r) => r.gaveUp > 0)) {
    lines.push(
      `Given up: ${r.subject}, ${r.clients} clients: ${r.gaveUp} wait${r.gaveUp === 1 ? '' : 's'} still pending ${STRAGGLER_GRACE_MS / 1000} s after ` +
        'the segment ended; the wait columns count each with the time it had waited, so they are lower bounds.',
      '',
    );
  }
}
/** The most holds that overlapped at any instant (granted → released): at most the limit, and the limit when it is used. */
function mostAtOnce(acquisitions: Acquisition[]): number {
  const events = acquisitions
    .flatMap(
      (a) =>
        [
          [a.granted, 1],
          [a.released, -1],
        ] as const,
    )
    .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let now = 0;
  let most = 0;
  for (const [, d] of events) most = Math.max(most, (now += d));
  return most;
}
/**
 * The scenario 3 row of the mutex a shared subject is built on (its name is the mutex's plus a
 * suffix), with as many clients and the same hold: undefined when scenario 3 did not run that.
 */
const mutexOf = (r: ContendedResult) =>
  contendedResults
    .filter((m) => r.subject.startsWith(`${m.subject} `) && m.clients === r.clients && m.holdMs === r.holdMs)
    .sort((a, b) => b.subject.length - a.subject.length)[0];
const sharedTable = (results: ContendedResult[]) => {
  lines.push(
    "| subject | clients | holds/s | wait p50 | wait p99 | wait max | most held at once | Jain | holds/s / the mutex's | wait p99 / the mutex's |",
    '|---|---|---|---|---|---|---|---|---|---|',
  );
  for (const r of results) {
    const mutex = mutexOf(r);
    const against = mutex ? `${f(r.holdsPerSecond / mutex.holdsPerSecond)}× | ${f(r.wait.p99 / mutex.wait.p99)}×` : ' | ';
    lines.push(
      `| ${r.subject} | ${r.clients} | ${Math.round(r.holdsPerSecond)} | ${f(r.wait.p50)} | ${f(r.wait.p99)} | ${f(r.wait.max)} | ${mostAtOnce(r.acquisitions)} | ${f(r.jain, 3)} | ${against} |`,
    );
  }
  if (!results.length) lines.push('', '_No store with semaphores and read-write locks was up._');
  lines.push('');
  givenUp(results);
};
if (runs(7)) {
  lines.push(`## Scenario 7: semaphore (limit ${SEMAPHORE_LIMIT}, ${SHARED_CLIENTS} clients, 1 ms hold, ${durationMs / 1000} s)`, '');
  lines.push(
    'Each client takes a permit, holds it 1 ms and gives it back, as in scenario 3. "Most held at once" is counted from this process\'s own',
    "grant and release times, so it may read one below the store's own count, never above it. The last two columns set a row against",
    `the same backend's mutex in scenario 3 with ${SHARED_CLIENTS} clients (in full runs; blank when scenario 3 had no such row).`,
    '',
  );
  sharedTable(semaphoreResults);
}
if (runs(8)) {
  lines.push(
    `## Scenario 8: read-heavy read-write lock (${Math.round(READ_SHARE * 100)} % reads, ${SHARED_CLIENTS} clients, 1 ms hold, ${durationMs / 1000} s)`,
    '',
  );
  lines.push(
    'Each acquisition is a read with probability 0.9, else a write; writers queue in arrival order with the readers. The last two',
    'columns are as in scenario 7.',
    '',
  );
  sharedTable(readWriteResults);
}
if (runs(4)) {
  lines.push(
    `## Scenario 4: many keys (200 workers on 20 connections, 10 000 keys drawn Zipf(1), empty critical section, ${durationMs / 1000} s)`,
    '',
  );
  lines.push(
    '| subject | acquisitions/s | wait p50 | wait p99 | wait max | store CPU s per 1000 | store requests per acquisition | client CPU µs per acquisition |',
    '|---|---|---|---|---|---|---|---|',
  );
  for (const r of manyKeysResults) {
    lines.push(
      `| ${r.subject} | ${Math.round(r.perSecond)} | ${f(r.wait.p50)} | ${f(r.wait.p99)} | ${f(r.wait.max)} | ${optional(r.storeCpuPer1000, 3)} | ${optional(r.storeRequestsPerAcquisition, 1)} | ${f(r.clientCpuUs, 1)} |`,
    );
  }
  lines.push(
    '',
    "Store CPU: user + system time of the server process listening on the store's port (this process for memory), from /proc.",
    CLIENT_CPU_NOTE,
    '',
  );
  for (const s of available.filter((s) => runs(4) && s.livelocksAbove))
    lines.push(`Not run here: ${s.name}: ${s.livelocksAbove!.reason}.`, '');
}
if (runs(10)) {
  lines.push(
    '## Scenario 10: a busy host (scenarios 1 and 4 beside a neighbour that keeps a core busy)',
    '',
    loadNote,
    `Each store's scenario 1 group, then its scenario 4 group, ran again with another process spinning on one of this machine's ${cpus().length}`,
    "cores the whole time, as a build or another service does on a shared host. The client, the store's server and the neighbour then",
    'queue for the cores left, so what a client spends per operation shows in its wall time. "Idle" is the same row in scenario 1 or 4',
    'of this run (n/a when that scenario did not run).',
    CLIENT_CPU_NOTE,
    '',
    '| subject | p50 ms idle → busy | overhead vs floor (p50) idle → busy | client CPU µs per cycle idle → busy |',
    '|---|---|---|---|',
  );
  for (const r of busyUncontendedResults) {
    const idle = uncontendedResults.find((x) => x.subject === r.subject);
    const idleRatio = idle ? floorRatioText(idle, floorOf(r.subject)) : '';
    lines.push(
      `| ${r.subject} | ${idle ? f(idle.cycle.p50, 3) : 'n/a'} → ${f(r.cycle.p50, 3)} | ${idleRatio || 'n/a'} → ${floorRatioText(r, floorOf(r.subject, busyUncontendedResults)) || 'n/a'} | ${idle ? f(idle.clientCpuUs, 1) : 'n/a'} → ${f(r.clientCpuUs, 1)} |`,
    );
  }
  lines.push(
    '',
    '| subject (scenario 4) | acquisitions/s idle → busy | wait p99 ms idle → busy | client CPU µs per acquisition idle → busy |',
    '|---|---|---|---|',
  );
  for (const r of busyManyKeysResults) {
    const idle = manyKeysResults.find((x) => x.subject === r.subject);
    lines.push(
      `| ${r.subject} | ${idle ? Math.round(idle.perSecond) : 'n/a'} → ${Math.round(r.perSecond)} | ${idle ? f(idle.wait.p99) : 'n/a'} → ${f(r.wait.p99)} | ${idle ? f(idle.clientCpuUs, 1) : 'n/a'} → ${f(r.clientCpuUs, 1)} |`,
    );
  }
  lines.push('');
}
if (runs(5)) {
  lines.push(
    `## Scenario 5: long holds (5 locks held ${holdMs / 1000} s each by one Locker with a short ttl, then the store forgets each one)`,
    '',
  );
  if (!longHoldResults.length) lines.push(noStore, '');
  else
    lines.push(
      '| subject | ttl ms | renew calls per lock-minute | store requests per lock-minute | lost while held | loss → signal abort p50 / max ms | losses unnoticed after 2 × ttl |',
      '|---|---|---|---|---|---|---|',
    );
  for (const r of longHoldResults) {
    const abort = r.lossToAbort ? `${f(r.lossToAbort.p50)} / ${f(r.lossToAbort.max)}` : 'n/a';
    lines.push(
      `| ${r.subject} | ${r.ttlMs} | ${f(r.renewalsPerMinute, 1)} | ${optional(r.storeRequestsPerMinute, 1)} | ${r.lostWhileHeld} | ${abort} | ${r.unnoticed} |`,
    );
  }
  lines.push(
    '',
    "Loss is injected by deleting the lock's record in the store through the backend's own connection, at a random point of the renewal",
    'cycle; the time runs from sending that deletion. A backend that renews by polling notices at its next renewal (ttl / 3 at most); one',
    'with a push notice (a ZooKeeper node watch, an etcd lease) at once.',
    '',
  );
}
// The thesis' own numbers (the Cassandra fair-lock thesis: 5000 acquisitions per process): [mean, max] ms.
const thesisOriginal: Record<string, Record<number, [number, number]>> = {
  'deadbolt cassandra shadow': { 1: [25, 146], 3: [53, 155_817], 5: [107, 502_441] },
  'deadbolt cassandra queue': { 1: [15, 39], 3: [56, 537], 5: [106, 605] },
};
if (runs(12)) lines.push(...heldLines(heldResults.flat(), heldCounts));
if (runs(13)) lines.push(...waitersLines(waiterResults.flat(), waiterCounts, handoffMs));
if (runs(9)) lines.push(...(fenceResults.length ? fenceCostLines(fenceResults, fenceWrites) : [noStore, '']));
if (runs(11))
  lines.push(...(electionResults.length ? electionLines(electionResults, elections, failovers, jobCalls, burstCalls) : [noStore, '']));
if (runs(2)) {
  lines.push(`## Scenario 2: the thesis experiment (${thesisCount} acquisitions per process, one key, empty critical section)`, '');
  if (!thesisResults.length) lines.push(noStore, '');
  else
    lines.push(
      '| subject | processes | mean wait | p99 wait | max wait | thesis mean / max | total s | share of the slowest process |',
      '|---|---|---|---|---|---|---|---|',
    );
  for (const r of thesisResults) {
    // How evenly the processes progressed: when the first finished vs the last (1 = together).
    const finish = r.series.map((s) => s[s.length - 1]![1]);
    const original = thesisOriginal[r.subject]?.[r.processes];
    lines.push(
      `| ${r.subject} | ${r.processes} | ${f(r.wait.mean)} | ${f(r.wait.p99)} | ${f(r.wait.max)} | ${original ? `${original[0]} / ${original[1]}` : ''} | ${f(r.seconds, 1)} | ${f(Math.min(...finish) / Math.max(...finish), 2)} |`,
    );
  }
  lines.push(
    '',
    'Thesis column: the thesis\'s runs on Cassandra with 5000 per process, old algorithm = shadow, new = queue. "Share of the slowest process" is the',
    'first finishing time over the last: near 1 when processes interleave evenly (queue), low when one process runs in bursts.',
    '',
  );
}
if (failures.length) lines.push('## Steps that failed', '', ...failures.map((f) => `- ${f}`), '');
const summary = lines.join('\n');

const dir = join(resultsRoot, new Date().toISOString().replace(/[:.]/g, '-'));
mkdirSync(dir, { recursive: true });
writeFileSync(join(dir, 'summary.md'), summary);
const digested = digest({
  subjects: named,
  floorOf,
  uncontended: uncontendedResults,
  contended: contendedResults,
  semaphore: semaphoreResults,
  readWrite: readWriteResults,
  manyKeys: manyKeysResults,
  migration: migrationResults,
  longHolds: longHoldResults,
  failures,
});
writeFileSync(
  join(dir, 'report.html'),
  renderReport({
    title: `deadbolt benchmark, ${new Date().toISOString()}`,
    machine: `${machine} ${loadNote}`,
    ...digested,
    summaryMarkdown: summary,
    contended: contendedResults,
    thesis: thesisResults,
  }),
);
const micros = (ms: number) => Math.round(ms * 1000) / 1000;
/** An acquisition as [client, asked, granted, released, token?]: ms on this process's clock, to the µs. */
const compact = (a: Acquisition) => [a.client, micros(a.asked), micros(a.granted), micros(a.released), ...(a.token ? [a.token] : [])];
writeFileSync(
  join(dir, 'results.json'),
  JSON.stringify(
    {
      full,
      machine,
      stores: Object.fromEntries(stores.map((s) => [s, versions.get(s) ?? 'not running'])),
      raw,
      load,
      uncontended: uncontendedResults.map(({ cycleMs, ...rest }) => (raw ? { ...rest, cycleMs: cycleMs.map(micros) } : rest)),
      migration: migrationResults.map(({ pair, from, to, nested, dual }) => ({
        pair,
        fromP50: from.cycle.p50,
        toP50: to.cycle.p50,
        bothP50: nested.cycle.p50,
        dualP50: dual.cycle.p50,
        fromPerSecond: from.perSecond,
        toPerSecond: to.perSecond,
        bothPerSecond: nested.perSecond,
        dualPerSecond: dual.perSecond,
      })),
      contended: contendedResults.map(({ acquisitions, ...rest }) => (raw ? { ...rest, acquisitions: acquisitions.map(compact) } : rest)),
      semaphore: semaphoreResults.map(({ acquisitions, ...rest }) => ({ ...rest, mostAtOnce: mostAtOnce(acquisitions) })),
      readWrite: readWriteResults.map(({ acquisitions, ...rest }) => ({ ...rest, mostAtOnce: mostAtOnce(acquisitions) })),
      manyKeys: manyKeysResults.map(({ acquisitions, ...rest }) => (raw ? { ...rest, acquisitions: acquisitions.map(compact) } : rest)),
      busy: {
        uncontended: busyUncontendedResults.map(({ cycleMs: _, ...rest }) => rest),
        manyKeys: busyManyKeysResults.map(({ acquisitions: _, ...rest }) => rest),
      },
      longHolds: longHoldResults,
      held: heldResults.flat(),
      waiters: waiterResults.flat(),
      fences: fenceResults,
      elections: electionResults,
      thesis: thesisResults,
      failures,
      timeline,
    },
    null,
    1,
  ),
);
await Promise.all([...probes.values()].map((p) => p.close()));
// One screen on stdout: what the run shows and where the rest is (every table is in summary.md).
const [, ...glanceRows] = digested.glance;
const screen = [
  `deadbolt benchmark, ${full ? 'full' : 'quick'} profile: ${[...probes.keys()].join(', ')} in ${clock((performance.now() - startedAt) / 1000)}; ${load}`,
  ...[...leftOut].map(([store, why]) => `left out ${store}: ${why.slice(0, 120)}`),
  '',
  ...digested.headline.map((line) => `- ${line}`),
  ...(glanceRows.length ? ['', 'At a glance (deadbolt uncontended p50 | floor | over the floor | contended holds/s | peers):'] : []),
  ...glanceRows.map(([store, ...cells]) => `  ${store}: ${cells.join(' | ')}`),
  ...(failures.length ? ['', `${failures.length} step(s) failed: see the end of summary.md`] : []),
  '',
  `every table: ${join(dir, 'summary.md')}`,
  `charts:      ${join(dir, 'report.html')}`,
  `numbers:     ${join(dir, 'results.json')}${raw ? ' (with every sample: --raw)' : ' (summaries; --raw adds every sample)'}`,
];
console.log(screen.join('\n'));
if (failures.length) {
  console.error(`${failures.length} step(s) failed; see the end of summary.md`);
  process.exitCode = 1;
}
