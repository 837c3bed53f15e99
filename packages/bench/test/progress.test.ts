// The run's clock and its time left (progress.ts), on made-up timelines: no store, no run.
import { describe, expect, it } from 'vitest';
import { clock, describeLoad, scenarioOf, stepMeans, TimeLeft } from '../dist/progress.js';

describe('progress', () => {
  it('clock rounds to the whole second before splitting minutes: never 0:60', () => {
    expect(clock(59.6)).toBe('1:00');
    expect(clock(959.5)).toBe('16:00');
    expect(clock(61.2)).toBe('1:01');
    expect(clock(-3)).toBe('0:00');
  });

  it("the time left converges on a run's own pace, and a memory-only run is not told a whole run's time", () => {
    // Three scenarios: 4 steps of 10 s, 2 of 60 s, 3 of 1 s; an earlier run measured 20 s, 120 s and 2 s per step (twice as slow).
    const planned = new Map([
      [1, 4],
      [3, 2],
      [9, 3],
    ]);
    const left = new TimeLeft(
      planned,
      new Map([
        [1, 20],
        [3, 120],
        [9, 2],
        [2, 600],
      ]),
    );
    const truth = 4 * 10 + 2 * 60 + 3 * 1;
    let at = 0;
    const errors: number[] = [];
    for (const [scenario, seconds, n] of [
      [1, 10, 4],
      [3, 60, 2],
      [9, 1, 3],
    ] as const)
      for (let i = 0; i < n; i++) {
        left.begin(scenario, at);
        errors.push(Math.abs(left.left(at)! - (truth - at)));
        at += seconds;
      }
    left.begin(undefined, at);
    // After the first step the earlier run's means are scaled to this run's pace: exact here.
    expect(errors[0]).toBeGreaterThan(0);
    expect(Math.max(...errors.slice(1))).toBeLessThan(1e-9);
    // Scenario 2 (600 s a step last time) is not planned here, so it adds nothing.
    expect(left.left(at)).toBe(0);
  });

  it('without an earlier run, the average step so far; nothing at all before a step has ended', () => {
    const left = new TimeLeft(new Map([[1, 3]]));
    left.begin(1, 0);
    expect(left.left(1)).toBeUndefined();
    left.begin(1, 4);
    expect(left.left(5)).toBe(3 + 4); // this step's remaining 3 s, and one more step of 4 s
  });

  it("an earlier run's timeline gives each scenario's mean step", () => {
    const means = stepMeans([
      [0, 'scenario 1: memory, floor, ours and peers interleaved'],
      [4, 'scenario 1: redis, floor, ours and peers interleaved'],
      [10, 'scenario 3, 2 clients: deadbolt memory'],
      [13, 'done'],
    ]);
    expect(means).toEqual(
      new Map([
        [1, 5],
        [3, 3],
      ]),
    );
    expect(scenarioOf('scenario 10, scenario 4 beside a busy neighbour: x')).toBe(10);
    expect(scenarioOf('done')).toBeUndefined();
  });

  it('the load line names the cores, steal where readable, and warns when the machine was busy before the run began', () => {
    const start = { load1: 0.5, cores: 2, jiffies: { total: 1000, steal: 10 } };
    expect(describeLoad(start, { load1: 3.5, cores: 2, jiffies: { total: 2000, steal: 60 } })).toBe(
      'load 0.50 at the start → 3.50 at the end (its own processes included) on 2 cores, steal 5.0 %',
    );
    expect(describeLoad({ load1: 2.4, cores: 2 }, { load1: 3.1, cores: 2 })).toBe(
      'load 2.40 at the start → 3.10 at the end (its own processes included) on 2 cores (busy before it began: read ratios with care)',
    );
  });
});
