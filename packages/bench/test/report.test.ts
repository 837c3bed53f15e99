import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { renderReport } from '../dist/report.js';
import { contended, thesis } from '../dist/scenarios.js';
import { subjects } from '../dist/subjects.js';

const chromium = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => {
  try {
    return statSync(p).isFile();
  } catch {
    return false;
  }
});
// Flags that keep headless Chromium off the network (this machine has none) and out of the sandbox root refuses.
const flags = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

describe('report.html', () => {
  it('renders offline in headless Chromium with every chart, from a real (small) run', async () => {
    expect(chromium, 'Debian chromium must be installed (scripts/test.sh installs it)').toBeDefined();
    const all = subjects();
    const memory = all.find((s) => s.name === 'deadbolt memory')!;
    const redis = all.find((s) => s.name === 'deadbolt redis')!;
    const contendedResults = [await contended(memory, 2, 1, 300), await contended(redis, 2, 1, 300)];
    const thesisResults = [await thesis(redis, 2, 20)];
    const html = renderReport({
      title: 'deadbolt report test',
      machine: 'test',
      summaryMarkdown: '| a | b |',
      contended: contendedResults,
      thesis: thesisResults,
    });
    const dir = mkdtempSync(join(tmpdir(), 'deadbolt-report-'));
    const file = join(dir, 'report.html');
    writeFileSync(file, html);
    expect(html).not.toMatch(/<script|https?:\/\//); // opens offline: nothing to fetch, nothing to run

    const run = (...args: string[]) =>
      execFileSync(chromium!, [...flags, `--user-data-dir=${join(dir, 'profile')}`, ...args], {
        encoding: 'utf8',
        timeout: 60_000,
        stdio: ['ignore', 'pipe', 'ignore'],
      });
    const dom = run('--dump-dom', `file://${file}`);
    // One distribution chart per client count, the fairness bars, one thesis chart.
    expect(dom.match(/<svg/g)?.length).toBe(3);
    expect(dom).toContain('acquisition number');
    for (const r of contendedResults) expect(dom).toContain(r.subject);
    run(`--screenshot=${join(dir, 'report.png')}`, '--window-size=1280,1400', `file://${file}`);
    const png = readFileSync(join(dir, 'report.png'));
    expect(png.subarray(1, 4).toString()).toBe('PNG');
    expect(png.length).toBeGreaterThan(20_000); // charts drawn, not a blank page
  }, 120_000);
});
