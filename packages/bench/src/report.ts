/**
 * `report.html`: the run's charts as inline SVG in one self-contained file (no scripts, fonts or
 * network), so it opens offline: wait-time distributions per contended subject, the thesis'
 * "acquisition number vs ms since start" per process, and Jain's fairness index.
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

/** Horizontal bars, one per labelled value in [0, 1]. */
function barChart(title: string, bars: { label: string; value: number }[]): string {
  if (bars.length === 0) return '';
  const row = 18;
  const height = PAD.top + bars.length * row + 10;
  const left = 300;
  const rows = bars
    .map((b, i) => {
      const y = PAD.top + i * row;
      const width = Math.max(0, Math.min(1, b.value)) * (W - left - 40);
      return `<text x="${left - 6}" y="${y + 12}" text-anchor="end">${escape(b.label)}</text><rect x="${left}" y="${y + 2}" width="${width.toFixed(1)}" height="${row - 5}" fill="${COLORS[0]}"/><text x="${left + width + 4}" y="${y + 12}">${b.value.toFixed(3)}</text>`;
    })
    .join('');
  return `<figure><svg viewBox="0 0 ${W} ${height}" width="${W}" height="${height}" role="img" aria-label="${escape(title)}"><text x="${W / 2}" y="15" text-anchor="middle" font-weight="bold">${escape(title)}</text>${rows}</svg></figure>`;
}

/** Wait-time distribution: the sorted waits as a percentile curve (x: percentile, y: ms, log). */
function percentileCurve(waits: number[]): [number, number][] {
  const sorted = [...waits].sort((a, b) => a - b);
  return sorted.map((w, i) => [(100 * (i + 1)) / sorted.length, w]);
}

export interface ReportInput {
  title: string;
  machine: string;
  summaryMarkdown: string;
  contended: ContendedResult[];
  thesis: ThesisResult[];
}

export function renderReport(input: ReportInput): string {
  const sections: string[] = [];
  const byClients = new Map<number, ContendedResult[]>();
  for (const r of input.contended) byClients.set(r.clients, [...(byClients.get(r.clients) ?? []), r]);
  for (const [clients, results] of byClients) {
    sections.push(
      lineChart(
        `Scenario 3: wait distribution, ${clients} clients`,
        'percentile of acquisitions',
        'wait ms (log)',
        results.map((r) => ({
          label: `${r.subject}${r.holdMs === 0 ? ' (hold 0)' : ''}`,
          points: percentileCurve(r.acquisitions.map((a) => a.granted - a.asked)),
        })),
        true,
      ),
    );
  }
  sections.push(
    barChart(
      "Scenario 3: Jain's fairness index over clients (1 = equal shares)",
      input.contended.map((r) => ({ label: `${r.subject}, ${r.clients} clients`, value: r.jain })),
    ),
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
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escape(input.title)}</title>
<style>body{font:14px system-ui,sans-serif;margin:24px;max-width:1200px}svg{font:11px system-ui,sans-serif;background:#fff}
figure{display:inline-block;margin:8px;border:1px solid #eee}pre{white-space:pre-wrap;background:#f7f7f7;padding:12px}</style></head>
<body><h1>${escape(input.title)}</h1><p>${escape(input.machine)}</p>
<section id="charts">${sections.join('\n')}</section>
<h2>Summary</h2><pre>${escape(input.summaryMarkdown)}</pre></body></html>
`;
}
