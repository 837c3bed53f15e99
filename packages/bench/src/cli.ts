#!/usr/bin/env node
/**
 * `pnpm bench [--full] [--only redis,memory] [--thesis N]`: scenario 1 (uncontended cycle vs the
 * store's floor), scenario 3 (contended handoff), scenario 4 (many keys, Zipf) and scenario 2 (the
 * thesis experiment: 1, 3 and 5 processes × N acquisitions of one key) on every available deadbolt
 * backend and on the peers,
 * same servers, one run. Writes bench-results/<time>/{results.json, summary.md, report.html}.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { storeCpuSeconds } from './cpu.js';
import { contended, manyKeys, thesis, uncontended, type ContendedResult, type ManyKeysResult, type ThesisResult, type UncontendedResult } from './scenarios.js';
import { renderReport } from './report.js';
import { floors, subjects, type Store } from './subjects.js';

const args = process.argv.slice(2);
const full = args.includes('--full');
const only = args.includes('--only') ? args[args.indexOf('--only') + 1]!.split(',') : undefined;
const cycles = full ? 5000 : 2000;
const durationMs = full ? 10_000 : 3000;
const clientCounts = full ? [2, 8, 32] : [2, 8];
// The thesis ran 5000 per process; the polling stores need minutes per 1000 at 5 processes.
const thesisCount = args.includes('--thesis') ? Number(args[args.indexOf('--thesis') + 1]) : full ? 1000 : 100;

const f = (n: number, digits = 2) => n.toFixed(digits);

const all = subjects();
const stores = [...new Set(all.map((s) => s.store))].filter((store) => !only || only.includes(store));
const up = new Map<Store, boolean>();
for (const store of stores) {
  // A store is benchmarked when deadbolt's own backend can take a lock on it.
  const probe = await all.find((s) => s.store === store && s.name.startsWith('deadbolt'))!.client();
  up.set(store, await probe.acquire(`bench:probe:${process.pid}`).then(async (release) => (await release(), true), () => false));
  await probe.close().catch(() => undefined);
}
const available = all.filter((s) => up.get(s.store));
const thesisSubjects = available.filter((s) => s.store !== 'memory' && s.name.startsWith('deadbolt'));
const steps =
  stores.filter((store) => floors[store] && up.get(store)).length + available.length * (2 + clientCounts.length) + thesisSubjects.length * 3;
let done = 0;
const startedAt = performance.now();
/** A progress bar on stderr (a terminal only): steps done, elapsed time, what runs now. */
const progress = (text: string) => {
  if (!process.stderr.isTTY) return;
  if (text === '') return void process.stderr.write('\r\x1b[K');
  const width = 24;
  const filled = Math.round((width * done) / Math.max(1, steps));
  const elapsed = Math.round((performance.now() - startedAt) / 1000);
  process.stderr.write(`\r\x1b[K[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done + 1}/${steps} ${elapsed}s ${text.slice(0, 70)}`);
  done++;
};
const uncontendedResults: UncontendedResult[] = [];
const contendedResults: ContendedResult[] = [];

for (const store of stores) {
  const floor = floors[store];
  if (!floor || !up.get(store)) continue;
  progress(`scenario 1: ${floor.name}`);
  const client = await floor.client();
  uncontendedResults.push(await uncontended(floor.name, client, cycles));
  await client.close();
}
for (const subject of available) {
  progress(`scenario 1: ${subject.name}`);
  const client = await subject.client();
  uncontendedResults.push(await uncontended(subject.name, client, subject.store === 'memory' ? cycles * 50 : cycles));
  await client.close();
}
for (const subject of available) {
  for (const clients of clientCounts) {
    progress(`scenario 3: ${subject.name}, ${clients} clients`);
    contendedResults.push(await contended(subject, clients, 1, durationMs));
    // In memory a 1 ms timer is the whole cost; also show the raw handoff rate.
    if (subject.store === 'memory') contendedResults.push(await contended(subject, clients, 0, durationMs));
  }
}
const manyKeysResults: ManyKeysResult[] = [];
for (const subject of available) {
  progress(`scenario 4: ${subject.name}, 200 workers over 10 000 keys`);
  manyKeysResults.push(await manyKeys(subject, 200, 10_000, 20, durationMs, storeCpuSeconds(subject.store)));
}
const thesisResults: ThesisResult[] = [];
for (const subject of thesisSubjects) {
  for (const processes of [1, 3, 5]) {
    progress(`scenario 2: ${subject.name}, ${processes} processes × ${thesisCount}`);
    thesisResults.push(await thesis(subject, processes, thesisCount));
  }
}
progress('');

const floorOf = (subject: string) => {
  const store = all.find((s) => s.name === subject)?.store;
  const name = store && floors[store]?.name;
  return uncontendedResults.find((r) => r.subject === name);
};
const lines: string[] = [];
lines.push('# deadbolt benchmark', '');
lines.push(
  `Machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB; Node ${process.version}; ` +
    `stores: ${stores.map((s) => `${s} ${up.get(s) ? 'up' : 'not running (skipped)'}`).join(', ')}; profile ${full ? 'full' : 'quick'}. ` +
    'All subjects ran in this one process, one after another, on the same servers (test-matrix versions: `test-matrix/status`).',
  '',
);
lines.push('## Scenario 1: uncontended acquire + release', '');
lines.push('| subject | cycles | cycles/s | p50 ms | p99 ms | overhead vs floor (p50) |', '|---|---|---|---|---|---|');
for (const r of uncontendedResults) {
  const floor = floorOf(r.subject);
  const ratio = floor ? `${f(r.cycle.p50 / floor.cycle.p50)}×` : '';
  lines.push(`| ${r.subject} | ${r.cycles} | ${Math.round(r.perSecond)} | ${f(r.cycle.p50, 3)} | ${f(r.cycle.p99, 3)} | ${ratio} |`);
}
lines.push('', `## Scenario 3: contended handoff (1 ms critical section unless the hold column says 0, ${durationMs / 1000} s per row)`, '');
lines.push('| subject | clients | hold ms | holds/s | wait p50 | wait p99 | wait max | handoffs to another client | handoff p50 | handoff p99 | Jain |');
lines.push('|---|---|---|---|---|---|---|---|---|---|---|');
for (const r of contendedResults) {
  const total = r.acquisitions.length;
  lines.push(
    `| ${r.subject} | ${r.clients} | ${r.holdMs} | ${Math.round(r.holdsPerSecond)} | ${f(r.wait.p50)} | ${f(r.wait.p99)} | ${f(r.wait.max)} | ` +
      `${r.handoffsToOther}/${total} (${Math.round((100 * r.handoffsToOther) / Math.max(1, total))} %) | ${f(r.handoff.p50)} | ${f(r.handoff.p99)} | ${f(r.jain, 3)} |`,
  );
}
lines.push('', 'Times in ms. Wait = ask → granted. Handoff = previous holder starts releasing → next holder (a different client) granted.', '');
lines.push(`## Scenario 4: many keys (200 workers on 20 connections, 10 000 keys drawn Zipf(1), empty critical section, ${durationMs / 1000} s)`, '');
lines.push('| subject | acquisitions/s | wait p50 | wait p99 | wait max | store CPU s per 1000 |', '|---|---|---|---|---|---|');
for (const r of manyKeysResults) {
  lines.push(`| ${r.subject} | ${Math.round(r.perSecond)} | ${f(r.wait.p50)} | ${f(r.wait.p99)} | ${f(r.wait.max)} | ${r.storeCpuPer1000 === undefined ? 'n/a' : f(r.storeCpuPer1000, 3)} |`);
}
lines.push('', 'Store CPU: user + system time of the server process listening on the store\'s port (this process for memory), from /proc.', '');
lines.push(`## Scenario 2: the thesis experiment (${thesisCount} acquisitions per process, one key, empty critical section)`, '');
lines.push('| subject | processes | mean wait | p99 wait | max wait | total s | share of the slowest process |', '|---|---|---|---|---|---|---|');
for (const r of thesisResults) {
  // How evenly the processes progressed: when the slowest finished vs the whole run (1 = together).
  const finish = r.series.map((s) => s[s.length - 1]![1]);
  lines.push(`| ${r.subject} | ${r.processes} | ${f(r.wait.mean)} | ${f(r.wait.p99)} | ${f(r.wait.max)} | ${f(r.seconds, 1)} | ${f(Math.min(...finish) / Math.max(...finish), 2)} |`);
}
lines.push(
  '',
  'The thesis (seed 000; Cassandra, 5000 per process) measured: mean wait old (shadow) / new (queue) 25 / 15 ms at 1 process,',
  '53 / 56 ms at 3, 107 / 106 ms at 5; max wait 146 / 39 ms, 155 817 / 537 ms, 502 441 / 605 ms. "Share of the slowest process"',
  'is the first finishing time over the last: near 1 when processes interleave evenly (queue), low when one process runs in bursts.',
  '',
);
const summary = lines.join('\n');
console.log(summary);

const dir = join(process.env.INIT_CWD ?? process.cwd(), 'bench-results', new Date().toISOString().replace(/[:.]/g, '-'));
mkdirSync(dir, { recursive: true });
writeFileSync(join(dir, 'summary.md'), summary);
writeFileSync(
  join(dir, 'report.html'),
  renderReport({ title: `deadbolt benchmark, ${new Date().toISOString()}`, machine: lines[2] ?? '', summaryMarkdown: summary, contended: contendedResults, thesis: thesisResults }),
);
writeFileSync(
  join(dir, 'results.json'),
  JSON.stringify({ full, stores: Object.fromEntries(up), node: process.version, uncontended: uncontendedResults, contended: contendedResults, manyKeys: manyKeysResults, thesis: thesisResults }, null, 1),
);
console.log(`\nwritten to ${dir}`);
