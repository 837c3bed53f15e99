/**
 * `report.html`: one self-contained file (no scripts, fonts or network), so it opens offline: the
 * run's headline and an at-a-glance table first, then a chart per scenario as inline SVG (bars the
 * benchmark computed: ratios to the floor, ours beside the peers, fairness; wait-time distributions
 * for the tails; the thesis' "acquisition number vs ms since start" per process), then the whole
 * summary with its tables as HTML tables.
 */
import type { ContendedResult, ThesisResult } from './scenarios.js';

const COLORS = [
  '#1f77b4',
  '#d62728',
  '#2ca02c',
  '#9467bd',
  '#ff7f0e',
  '#8c564b',
  '#e377c2',
  '#17becf',
  '#7f7f7f',
  '#bcbd22',
  '#393b79',
  '#ad494a',
];
const W = 560;
const H = 300;
const PAD = { left: 58, right: 12, top: 24, bottom: 40 };

const LEGEND_ROW = 14;
/** Colours repeat after COLORS.length series; the repeats are dashed so no two lines look alike. */
const dash = (i: number) => (i >= COLORS.length ? ` stroke-dasharray="${i >= 2 * COLORS.length ? '2 2' : '6 3'}"` : '');
const escape = (text: string) => text.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
const fmt = (n: number) => (n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2));

interface Series {
  label: string;
  points: [number, number][];
}

/** A line chart with linear x and linear or log10 y axes. */
function lineChart(title: string, xLabel: string, yLabel: string, series: Series[], logY = false): string {
  if (series.every((s) => s.points.length === 0)) return '';
  const ty = (v: number) => (logY ? Math.log10(Math.max(v, 0.01)) : v);
  // Loops, not Math.max(...points): a memory run records millions of points.
  let [xMax, yMin, yMax] = [0, Infinity, -Infinity];
  for (const s of series) {
    for (const [x, y] of s.points) [xMax, yMin, yMax] = [Math.max(xMax, x), Math.min(yMin, ty(y)), Math.max(yMax, ty(y))];
  }
  xMax ||= 1;
  const y0 = logY ? Math.floor(yMin) : 0;
  const y1 = logY ? Math.ceil(yMax) || 1 : yMax * 1.05 || 1;
  const sx = (x: number) => PAD.left + (x / xMax) * (W - PAD.left - PAD.right);
  const sy = (y: number) => H - PAD.bottom - ((ty(y) - y0) / (y1 - y0 || 1)) * (H - PAD.top - PAD.bottom);
  const ticks = logY ? Array.from({ length: y1 - y0 + 1 }, (_, i) => 10 ** (y0 + i)) : [0, 0.25, 0.5, 0.75, 1].map((f) => f * y1);
  const grid = ticks
    .map(
      (t) =>
        `<line x1="${PAD.left}" x2="${W - PAD.right}" y1="${sy(t)}" y2="${sy(t)}" stroke="#ddd"/><text x="${PAD.left - 4}" y="${sy(t) + 4}" text-anchor="end">${fmt(t)}</text>`,
    )
    .join('');
  const lines = series
    .map((s, i) => {
      const step = Math.max(1, Math.floor(s.points.length / 800)); // keep the file small
      const d = s.points
        .filter((_, j) => j % step === 0 || j === s.points.length - 1)
        .map(([x, y], j) => `${j ? 'L' : 'M'}${sx(x).toFixed(1)},${sy(y).toFixed(1)}`)
        .join('');
      return `<path d="${d}" fill="none" stroke="${COLORS[i % COLORS.length]}"${dash(i)} stroke-width="1.5"/>`;
    })
    .join('');
  // The legend sits below the plot, two columns, each entry with a sample of its line.
  const legend = series
    .map((s, i) => {
      const [x, y] = [PAD.left + (i % 2) * ((W - PAD.left) / 2), H + 4 + Math.floor(i / 2) * LEGEND_ROW];
      return `<line x1="${x}" x2="${x + 18}" y1="${y - 4}" y2="${y - 4}" stroke="${COLORS[i % COLORS.length]}"${dash(i)} stroke-width="2"/><text x="${x + 22}" y="${y}">${escape(s.label)}</text>`;
    })
    .join('');
  const height = H + Math.ceil(series.length / 2) * LEGEND_ROW + 6;
  return `<figure><svg viewBox="0 0 ${W} ${height}" width="${W}" height="${height}" role="img" aria-label="${escape(title)}">
<text x="${W / 2}" y="15" text-anchor="middle" font-weight="bold">${escape(title)}</text>${grid}
<line x1="${PAD.left}" x2="${W - PAD.right}" y1="${H - PAD.bottom}" y2="${H - PAD.bottom}" stroke="#333"/>
<text x="${W - PAD.right}" y="${H - PAD.bottom + 16}" text-anchor="end">${fmt(xMax)}</text><text x="${PAD.left}" y="${H - PAD.bottom + 16}">0</text>
<text x="${(W + PAD.left) / 2}" y="${H - 6}" text-anchor="middle">${escape(xLabel)}</text>
<text x="14" y="${H / 2}" text-anchor="middle" transform="rotate(-90 14 ${H / 2})">${escape(yLabel)}</text>${lines}${legend}</svg></figure>`;
}

/** A bar: what it measures, its value, and whose it is (ours, or a floor or peer to compare with). */
export interface Bar {
  label: string;
  value: number;
  kind: 'ours' | 'other';
}

/** A bar chart the benchmark computed; `reference` draws a line at that value (1 for a ratio). */
export interface BarChart {
  title: string;
  bars: Bar[];
  unit?: string;
  reference?: number;
}

const KIND_COLOR = { ours: COLORS[0], other: COLORS[4] } as const;

/** A title in one or two lines of at most 80 characters (split after a colon or comma), as SVG text. */
function titleLines(title: string): string[] {
  if (title.length <= 80) return [title];
  const cut = Math.max(title.lastIndexOf(': ', 80), title.lastIndexOf(', ', 80));
  return cut > 0 ? [title.slice(0, cut + 1), title.slice(cut + 2)] : [title];
}

/** Horizontal bars, one per labelled value, scaled to the largest (or to the reference line). */
function barChart({ title, bars, unit = '', reference }: BarChart): string {
  if (bars.length === 0) return '';
  const row = 18;
  const heading = titleLines(title);
  const top = PAD.top + (heading.length - 1) * 14;
  const height = top + bars.length * row + 24;
  const left = 300;
  const span = W - left - 70;
  const max = Math.max(reference ?? 0, ...bars.map((b) => b.value)) || 1;
  const x = (v: number) => left + (Math.max(0, v) / max) * span;
  const rows = bars
    .map((b, i) => {
      const y = top + i * row;
      // A label longer than the room left of the bars is cut, whole in the tooltip.
      const text = b.label.length > 46 ? `${b.label.slice(0, 45)}…` : b.label;
      return `<text x="${left - 6}" y="${y + 12}" text-anchor="end"><title>${escape(b.label)}</title>${escape(text)}</text><rect x="${left}" y="${y + 2}" width="${(x(b.value) - left).toFixed(1)}" height="${row - 5}" fill="${KIND_COLOR[b.kind]}"/><text x="${x(b.value) + 4}" y="${y + 12}">${fmt(b.value)}${escape(unit)}</text>`;
    })
    .join('');
  const bottom = top + bars.length * row;
  const line =
    reference === undefined
      ? ''
      : `<line x1="${x(reference)}" x2="${x(reference)}" y1="${top}" y2="${bottom}" stroke="#333" stroke-dasharray="3 3"/><text x="${x(reference)}" y="${bottom + 14}" text-anchor="middle">${fmt(reference)}${escape(unit)}</text>`;
  return `<figure><svg viewBox="0 0 ${W} ${height}" width="${W}" height="${height}" role="img" aria-label="${escape(title)}">${heading
    .map((text, i) => `<text x="${W / 2}" y="${15 + i * 14}" text-anchor="middle" font-weight="bold">${escape(text)}</text>`)
    .join('')}${rows}${line}</svg></figure>`;
}

/** Wait-time distribution: the sorted waits as a percentile curve (x: percentile, y: ms, log). */
function percentileCurve(waits: number[]): [number, number][] {
  const sorted = [...waits].sort((a, b) => a - b);
  return sorted.map((w, i) => [(100 * (i + 1)) / sorted.length, w]);
}

export interface ReportInput {
  title: string;
  machine: string;
  /** What the run shows, one sentence each, first on the page. */
  headline: string[];
  /** The at-a-glance table: a header row, then one row per store (plain text cells). */
  glance: string[][];
  /** Bar charts, in the order the summary has their scenarios. */
  charts: BarChart[];
  summaryMarkdown: string;
  contended: ContendedResult[];
  thesis: ThesisResult[];
}

const label = (r: ContendedResult) => `${r.subject}, ${r.clients} clients${r.holdMs === 1 ? '' : `, hold ${r.holdMs}`}`;

export function renderReport(input: ReportInput): string {
  const sections: string[] = input.charts.map(barChart);
  const byClients = new Map<number, ContendedResult[]>();
  for (const r of input.contended) byClients.set(r.clients, [...(byClients.get(r.clients) ?? []), r]);
  for (const [clients, results] of byClients) {
    sections.push(
      lineChart(
        `Scenario 3: wait distribution, ${clients} clients (the tail on the right)`,
        'percentile of acquisitions',
        'wait ms (log)',
        results.map((r) => ({
          label: `${r.subject}${r.holdMs === 1 ? '' : ` (hold ${r.holdMs})`}`,
          points: percentileCurve(r.acquisitions.map((a) => a.granted - a.asked)),
        })),
        true,
      ),
    );
  }
  sections.push(
    barChart({
      title: "Scenario 3: Jain's fairness index over clients (1 = equal shares)",
      bars: input.contended.map((r) => ({ label: label(r), value: r.jain, kind: 'ours' })),
      reference: 1,
    }),
  );
  for (const r of input.thesis) {
    sections.push(
      lineChart(
        `Scenario 2 (thesis): ${r.subject}, ${r.processes} process${r.processes > 1 ? 'es' : ''}`,
        'acquisition number',
        'ms since start',
        r.series.map((s, p) => ({ label: `process ${p + 1}`, points: s.map(([, done], i) => [i + 1, done] as [number, number]) })),
      ),
    );
  }
  const [head, ...rows] = input.glance;
  const glance = head
    ? `<table><thead><tr>${head.map((c) => `<th>${escape(c)}</th>`).join('')}</tr></thead><tbody>${rows
        .map((r) => `<tr>${r.map((c) => `<td>${escape(c)}</td>`).join('')}</tr>`)
        .join('')}</tbody></table>`
    : '';
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escape(input.title)}</title>
<style>body{font:14px system-ui,sans-serif;margin:24px;max-width:1240px;color:#222}svg{font:11px system-ui,sans-serif;background:#fff}
figure{display:inline-block;margin:8px;border:1px solid #eee}table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left}th{background:#f3f3f3}tr:nth-child(even) td{background:#fafafa}
code{background:#f3f3f3;padding:0 3px}.key span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}</style></head>
<body><h1>${escape(input.title)}</h1><p>${escape(input.machine)}</p>
<h2>What this run shows</h2><ul>${input.headline.map((h) => `<li>${inline(h)}</li>`).join('')}</ul>
<h2>At a glance</h2>${glance}
<h2>Charts</h2><p class="key"><span style="background:${KIND_COLOR.ours}"></span>deadbolt<span style="background:${KIND_COLOR.other}"></span>a store's floor or a peer library</p>
<section id="charts">${sections.join('\n')}</section>
<h2>Summary</h2>${markdownToHtml(input.summaryMarkdown)}</body></html>
`;
}

/** `code` and _emphasis_ in an escaped line of text. */
function inline(text: string): string {
  return escape(text)
    .replace(/`([^`]+)`/g, '<code>$1</code>')
    .replace(/(^|[\s(])_([^_]+)_(?=[\s).,;:]|$)/g, '$1<em>$2</em>');
}

/**
 * The summary's Markdown as HTML: headings, tables, lists and paragraphs, the only constructs the
 * benchmark writes; anything else is kept as a paragraph of text.
 */
export function markdownToHtml(markdown: string): string {
  const out: string[] = [];
  const cells = (l: string) =>
    l
      .replace(/^\|/, '')
      .replace(/\|$/, '')
      .split('|')
      .map((c) => c.trim());
  // Runs of lines of one kind: a table, a list, a paragraph; a blank line or a heading ends a run.
  let run: { kind: 'table' | 'list' | 'text'; lines: string[] } | undefined;
  const flush = () => {
    if (!run) return;
    const { kind, lines } = run;
    if (kind === 'table') {
      const [head, , ...body] = lines;
      out.push(
        `<table><thead><tr>${cells(head!)
          .map((c) => `<th>${inline(c)}</th>`)
          .join('')}</tr></thead><tbody>${body
          .map(
            (r) =>
              `<tr>${cells(r)
                .map((c) => `<td>${inline(c)}</td>`)
                .join('')}</tr>`,
          )
          .join('')}</tbody></table>`,
      );
    } else if (kind === 'list') out.push(`<ul>${lines.map((l) => `<li>${inline(l.slice(2))}</li>`).join('')}</ul>`);
    else out.push(`<p>${inline(lines.join(' '))}</p>`);
    run = undefined;
  };
  for (const line of markdown.split('\n')) {
    const heading = /^(#{1,4}) (.*)$/.exec(line);
    if (line.trim() === '' || heading) {
      flush();
      // One level down: the page's own h1 is the title.
      if (heading) out.push(`<h${heading[1]!.length + 1}>${inline(heading[2]!)}</h${heading[1]!.length + 1}>`);
      continue;
    }
    const kind = line.startsWith('|') ? 'table' : line.startsWith('- ') ? 'list' : 'text';
    if (run?.kind !== kind) flush();
    (run ??= { kind, lines: [] }).lines.push(line);
  }
  flush();
  return out.join('\n');
}
