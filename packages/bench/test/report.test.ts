import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { digest } from '../dist/digest.js';
import { markdownToHtml, renderReport } from '../dist/report.js';
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
    const summary = [
      '## Scenario 3',
      '',
      'Text `code`.',
      '| subject | holds/s |',
      '|---|---|',
      '| deadbolt redis | 5 |',
      '',
      '- a step',
    ].join('\n');
    const html = renderReport({
      title: 'deadbolt report test',
      machine: 'test',
      ...digest({
        subjects: all.map((s) => ({ name: s.name, store: s.store, ours: s.name.startsWith('deadbolt ') })),
        floorOf: () => undefined,
        uncontended: [],
        contended: contendedResults,
        semaphore: [],
        readWrite: [],
        manyKeys: [],
        migration: [],
        longHolds: [],
        failures: [],
      }),
      summaryMarkdown: summary,
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
    // Holds per second and the wait distribution for the one client count, the fairness bars, one thesis chart.
    expect(dom.match(/<svg/g)?.length).toBe(4);
    // The headline first, then the summary's Markdown as HTML: its table a table, its list a list.
    expect(dom).toMatch(/What this run shows<\/h2><ul><li>\d+ contended grants checked: every fencing token above the one before it/);
    expect(dom).toContain(
      '<table><thead><tr><th>subject</th><th>holds/s</th></tr></thead><tbody><tr><td>deadbolt redis</td><td>5</td></tr></tbody></table>',
    );
    expect(dom).toContain('<ul><li>a step</li></ul>');
    expect(dom).not.toContain('<pre>');
    expect(dom).toContain('acquisition number');
    for (const r of contendedResults) expect(dom).toContain(r.subject);
    run(`--screenshot=${join(dir, 'report.png')}`, '--window-size=1280,1400', `file://${file}`);
    const png = readFileSync(join(dir, 'report.png'));
    expect(png.subarray(1, 4).toString()).toBe('PNG');
    expect(png.length).toBeGreaterThan(20_000); // charts drawn, not a blank page
  }, 120_000);
});

describe('markdownToHtml', () => {
  it("turns the summary's headings, paragraphs, tables and lists into HTML, escaping text", () => {
    const html = markdownToHtml(
      ['# Title', '', 'a <b> & `c`', 'more', '| x | y |', '|---|---|', '| 1 | _n/a_ |', '', '- one', '- two'].join('\n'),
    );
    expect(html).toBe(
      [
        '<h2>Title</h2>',
        '<p>a &#60;b&#62; &#38; <code>c</code> more</p>',
        '<table><thead><tr><th>x</th><th>y</th></tr></thead><tbody><tr><td>1</td><td><em>n/a</em></td></tr></tbody></table>',
        '<ul><li>one</li><li>two</li></ul>',
      ].join('\n'),
    );
  });
});
