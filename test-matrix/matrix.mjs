// Turns a vitest JSON report into the conformance matrix: test-matrix/results/latest.{md,json},
// a backend × behaviour table (pass / fail / n/a with the reason) plus the server versions.
// Prints the overall "N passed, N failed, N skipped" line. Usage: node matrix.mjs <vitest.json>
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const report = JSON.parse(readFileSync(process.argv[2] ?? join(here, 'results/vitest.json'), 'utf8'));
const backends = new Map(); // backend → Map(behaviour → {state, reason})
const behaviours = new Map(); // number → title
let passed = 0, failed = 0, skipped = 0;
for (const file of report.testResults) {
  for (const t of file.assertionResults) {
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
}
const versions = {};
try {
  for (const line of execFileSync('bash', [join(here, 'status')], { encoding: 'utf8' }).trim().split('\n')) {
    const [name, state, , ...version] = line.split(/\s+/);
    versions[name] = state === 'up' ? version.join(' ') : 'down';
  }
} catch { /* status is informational */ }
const ids = [...behaviours.keys()].sort((a, b) => parseInt(a) - parseInt(b) || a.localeCompare(b));
const names = [...backends.keys()];
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
console.log(`conformance matrix: ${names.length} backends × ${ids.length} behaviours → test-matrix/results/latest.md`);
console.log(`deadbolt: ${passed} passed, ${failed} failed, ${skipped} skipped`);
if (passed === 0 || failed > 0) process.exit(1);
