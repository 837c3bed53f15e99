import * as hdr from 'hdr-histogram-js';

/** Latency summary in milliseconds, from an HDR histogram recorded in microseconds. */
export interface Summary {
  count: number;
  p50: number;
  p99: number;
  max: number;
  mean: number;
}

export function summarize(valuesMs: number[]): Summary {
  const histogram = hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 3_600_000_000, numberOfSignificantValueDigits: 3 });
  for (const v of valuesMs) histogram.recordValue(Math.max(1, Math.round(v * 1000)));
  const ms = (us: number) => us / 1000;
  const summary = {
    count: valuesMs.length,
    p50: ms(histogram.getValueAtPercentile(50)),
    p99: ms(histogram.getValueAtPercentile(99)),
    max: ms(histogram.maxValue),
    mean: ms(histogram.mean),
  };
  histogram.destroy();
  return summary;
}

/** Jain's fairness index over per-client counts: 1 when all equal, 1/n when one client got everything. */
export function jain(counts: number[]): number {
  const sum = counts.reduce((a, b) => a + b, 0);
  const squares = counts.reduce((a, b) => a + b * b, 0);
  return squares === 0 ? 1 : (sum * sum) / (counts.length * squares);
}
