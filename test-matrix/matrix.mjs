// Turns vitest JSON reports into the conformance matrix, test-matrix/results/latest.{md,json}: a
// backend × behaviour table (pass / fail / n/a with the reason) plus the server versions; and into
// test-matrix/results/slowest.md, where the time goes (by lane, by file, the slowest tests).
// Prints the overall "N passed, N failed, N skipped" line.
//   node matrix.mjs <vitest.json>...   (several: the test command's lanes and its restart phase)
// A test that ran in one report and was filtered out in another (the restart phase runs only the
// tests the lanes left out) counts once, with the result of the report that ran it.
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const reports = process.argv.length > 2 ? process.argv.slice(2) : [join(here, 'results/vitest.json')];

/** Every test once, by file and full name: the run that passed or failed it wins over one that skipped it. */
const tests = new Map();
const lanes = [];
for (const path of reports) {
  const report = JSON.parse(readFileSync(path, 'utf8'));
  const lane = basename(path).replace(/^vitest-|\.json$/g, '');
  let laneMs = 0;
  let first = Infinity;
  let last = 0;
  for (const file of report.testResults) {
    first = Math.min(first, file.startTime);
    last = Math.max(last, file.endTime);
    for (const t of file.assertionResults) {
      const id = `${file.name}\n${[...t.ancestorTitles, t.title].join(' > ')}`;
      const ran = t.status === 'passed' || t.status === 'failed';
      if (ran) laneMs += t.duration ?? 0;
      const seen = tests.get(id);
      if (!seen || (ran && seen.status !== 'passed' && seen.status !== 'failed')) tests.set(id, { ...t, file: relative(root, file.name), lane });
    }
  }
  lanes.push({ lane, wallMs: last > first ? last - first : 0, testMs: laneMs });
}

const backends = new Map(); // backend → Map(behaviour → {state, reason})
const behaviours = new Map(); // number → title
let passed = 0, failed = 0, skipped = 0;
for (const t of tests.values()) {
  if (t.status === 'passed') passed++;
  else if (t.status === 'failed') failed++;
  else skipped++;
  const suite = t.ancestorTitles.find((a) => a.startsWith('conformance: '));
  if (!suite) continue;
  const backend = suite.slice('conformance: '.length);
  const m = /^(\d+[a-z]?)\. (.*?)(?: \[n\/a: (.*)\])?$/.exec(t.title);
  if (!m) continue;
  const [, id, title, reason] = m;
  behaviours.set(id, title);
  if (!backends.has(backend)) backends.set(backend, new Map());
  const state = t.status === 'passed' ? 'pass' : t.status === 'failed' ? 'FAIL' : 'n/a';
  backends.get(backend).set(id, { state, reason: reason ?? (t.failureMessages?.[0]?.split('\n')[0] ?? '') });
}
const versions = {};
try {
  for (const line of execFileSync('bash', [join(here, 'status')], { encoding: 'utf8' }).trim().split('\n')) {
    const [name, state, , ...version] = line.split(/\s+/);
    versions[name] = state === 'up' ? version.join(' ') : 'down';
  }
} catch { /* status is informational */ }
const ids = [...behaviours.keys()].sort((a, b) => parseInt(a) - parseInt(b) || a.localeCompare(b));
const names = [...backends.keys()].sort();
const cell = (b, id) => {
  const r = backends.get(b).get(id);
  if (!r) return '';
  return r.state === 'n/a' ? `n/a (${r.reason})` : r.state === 'FAIL' ? `**FAIL**: ${r.reason.replaceAll('|', '\\|').slice(0, 80)}` : 'pass';
};
const md = [
  '# Conformance matrix',
  '',
  `Generated ${new Date().toISOString()} by \`pnpm test\` / \`pnpm matrix\`. Servers: ${Object.entries(versions).map(([n, v]) => `${n} ${v}`).join('; ') || 'unknown'}.`,
  '',
  `| behaviour | ${names.join(' | ')} |`,
  `|---|${names.map(() => '---').join('|')}|`,
  ...ids.map((id) => `| ${id}. ${behaviours.get(id)} | ${names.map((b) => cell(b, id)).join(' | ')} |`),
  '',
  `Totals over all test files: ${passed} passed, ${failed} failed, ${skipped} skipped.`,
  '',
].join('\n');
writeFileSync(join(here, 'results/latest.md'), md);
const json = { generated: new Date().toISOString(), versions, totals: { passed, failed, skipped },
  backends: Object.fromEntries(names.map((b) => [b, Object.fromEntries(backends.get(b))])), behaviours: Object.fromEntries(behaviours) };
writeFileSync(join(here, 'results/latest.json'), JSON.stringify(json, null, 2) + '\n');

// Where the time goes: what a new suite adds has to fit beside these.
const ran = [...tests.values()].filter((t) => t.status === 'passed' || t.status === 'failed');
const byFile = new Map();
for (const t of ran) {
  const f = byFile.get(t.file) ?? { lane: t.lane, ms: 0, tests: 0 };
  f.ms += t.duration ?? 0;
  f.tests++;
  byFile.set(t.file, f);
}
const s = (ms) => (ms / 1000).toFixed(1);
const slowest = [
  '# Where the test command\'s time goes',
  '',
  `Generated ${new Date().toISOString()} from ${reports.length} vitest report(s) (\`node test-matrix/matrix.mjs\`). Seconds; a lane runs its files one after another, the lanes side by side, then the restart phase on its own.`,
  '',
  '| lane | wall | sum of its tests |',
  '|---|---|---|',
  ...lanes.map((l) => `| ${l.lane} | ${s(l.wallMs)} | ${s(l.testMs)} |`),
  '',
  '| file | lane | tests run | seconds |',
  '|---|---|---|---|',
  ...[...byFile.entries()].sort((a, b) => b[1].ms - a[1].ms).map(([file, f]) => `| ${file} | ${f.lane} | ${f.tests} | ${s(f.ms)} |`),
  '',
  'The 40 slowest tests:',
  '',
  '| seconds | lane | suite | test |',
  '|---|---|---|---|',
  ...ran.sort((a, b) => (b.duration ?? 0) - (a.duration ?? 0)).slice(0, 40).map((t) => `| ${s(t.duration ?? 0)} | ${t.lane} | ${(t.ancestorTitles[0] ?? '').replaceAll('|', '\\|')} | ${t.title.replaceAll('|', '\\|').slice(0, 110)} |`),
  '',
].join('\n');
writeFileSync(join(here, 'results/slowest.md'), slowest);

console.log(`conformance matrix: ${names.length} backends × ${ids.length} behaviours → test-matrix/results/latest.md (time: slowest.md)`);
console.log(`deadbolt: ${passed} passed, ${failed} failed, ${skipped} skipped`);
if (passed === 0 || failed > 0) process.exit(1);
