#!/usr/bin/env node
/**
 * `pnpm bench [--full] [--only redis,memory]`: scenario 1 (uncontended cycle vs the store's floor)
 * and scenario 3 (contended handoff) on every available deadbolt backend and on the Redis peers,
 * same server, one run. Writes bench-results/<time>/{results.json, summary.md}.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { contended, uncontended, type ContendedResult, type UncontendedResult } from './scenarios.js';
import { floors, subjects, type Store } from './subjects.js';

const args = process.argv.slice(2);
const full = args.includes('--full');
const only = args.includes('--only') ? args[args.indexOf('--only') + 1]!.split(',') : undefined;
const cycles = full ? 5000 : 2000;
const durationMs = full ? 10_000 : 3000;
const clientCounts = full ? [2, 8, 32] : [2, 8];
const progress = (text: string) => process.stderr.write(`\r\x1b[K${text}`);
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
const summary = lines.join('\n');
console.log(summary);

const dir = join(process.env.INIT_CWD ?? process.cwd(), 'bench-results', new Date().toISOString().replace(/[:.]/g, '-'));
mkdirSync(dir, { recursive: true });
writeFileSync(join(dir, 'summary.md'), summary);
writeFileSync(
  join(dir, 'results.json'),
  JSON.stringify({ full, stores: Object.fromEntries(up), node: process.version, uncontended: uncontendedResults, contended: contendedResults }, null, 1),
);
console.log(`\nwritten to ${dir}`);
