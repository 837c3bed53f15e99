// How the run tells its time: a clock that never prints "15:60", the time left from this run's own
// pace, and the machine's load at the start and the end, which every ratio is read beside.
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';

/** `seconds` as m:ss, rounded to the whole second first (59.6 s is 1:00, not 0:60). */
export function clock(seconds: number): string {
  const whole = Math.max(0, Math.round(seconds));
  return `${Math.floor(whole / 60)}:${String(whole % 60).padStart(2, '0')}`;
}

/** The scenario a step's label names (`scenario 3, 8 clients: …` → 3); undefined for none. */
export function scenarioOf(label: string): number | undefined {
  const match = /^scenario (\d+)/.exec(label);
  return match ? Number(match[1]) : undefined;
}

/**
 * The mean length in seconds of a step of each scenario in an earlier run, from its timeline
 * (`[start, label]` pairs in order; the last one is the end).
 */
export function stepMeans(timeline: readonly (readonly [number, string])[]): Map<number, number> {
  const sums = new Map<number, { seconds: number; steps: number }>();
  for (let i = 0; i + 1 < timeline.length; i++) {
    const scenario = scenarioOf(timeline[i]![1]);
    if (scenario === undefined) continue;
    const sum = sums.get(scenario) ?? { seconds: 0, steps: 0 };
    sum.seconds += timeline[i + 1]![0] - timeline[i]![0];
    sum.steps++;
    sums.set(scenario, sum);
  }
  return new Map([...sums].map(([scenario, { seconds, steps }]) => [scenario, seconds / steps]));
}

/**
 * The time left of a run whose steps are grouped by scenario, from its own pace. A scenario's
 * steps are taken to last as long as its steps so far in this run; a scenario not begun yet, as
 * long as in the earlier run (`previous`, mean seconds per step) scaled by how this run's finished
 * steps compare with that run's; without either, as long as this run's average step. Every
 * finished step replaces a guess by a measure, so the estimate converges on the run's end (a
 * memory-only run is estimated from its own steps, never from a run of every store).
 */
export class TimeLeft {
  readonly #planned: ReadonlyMap<number, number>;
  readonly #previous: ReadonlyMap<number, number>;
  readonly #measured = new Map<number, { seconds: number; steps: number }>();
  readonly #started = new Map<number, number>();
  #current: { scenario: number | undefined; at: number } | undefined;

  /** `planned`: how many steps each scenario has in this run. */
  constructor(planned: ReadonlyMap<number, number>, previous: ReadonlyMap<number, number> = new Map()) {
    this.#planned = planned;
    this.#previous = previous;
  }

  /** A step of `scenario` begins at `at` (seconds into the run); the step before ends there. */
  begin(scenario: number | undefined, at: number): void {
    const current = this.#current;
    if (current?.scenario !== undefined) {
      const sum = this.#measured.get(current.scenario) ?? { seconds: 0, steps: 0 };
      sum.seconds += at - current.at;
      sum.steps++;
      this.#measured.set(current.scenario, sum);
    }
    if (scenario !== undefined) this.#started.set(scenario, (this.#started.get(scenario) ?? 0) + 1);
    this.#current = { scenario, at };
  }

  /** Seconds left at `now`; undefined until something is known to estimate from. */
  left(now: number): number | undefined {
    const mean = this.#mean();
    let left = 0;
    for (const [scenario, planned] of this.#planned) {
      const perStep = mean(scenario);
      const notBegun = Math.max(0, planned - (this.#started.get(scenario) ?? 0));
      if (notBegun > 0 && perStep === undefined) return undefined;
      left += notBegun * (perStep ?? 0);
    }
    const current = this.#current;
    if (current?.scenario !== undefined) {
      const perStep = mean(current.scenario);
      if (perStep === undefined) return undefined;
      left += Math.max(0, perStep - (now - current.at));
    }
    return left;
  }

  #mean(): (scenario: number) => number | undefined {
    let seconds = 0;
    let steps = 0;
    let measuredTotal = 0;
    let previousTotal = 0;
    for (const [scenario, sum] of this.#measured) {
      seconds += sum.seconds;
      steps += sum.steps;
      const before = this.#previous.get(scenario);
      if (before !== undefined) {
        measuredTotal += sum.seconds;
        previousTotal += before * sum.steps;
      }
    }
    const pace = previousTotal > 0 ? measuredTotal / previousTotal : 1;
    return (scenario) => {
      const own = this.#measured.get(scenario);
      if (own) return own.seconds / own.steps;
      const before = this.#previous.get(scenario);
      if (before !== undefined) return before * pace;
      return steps > 0 ? seconds / steps : undefined;
    };
  }
}

/** The machine's load at one moment: load averages, cores, and the CPU time counters steal is read from. */
export interface LoadSample {
  /** 1-minute load average. */
  readonly load1: number;
  readonly cores: number;
  /** `/proc/stat`'s first line: total and steal jiffies; undefined where unreadable. */
  readonly jiffies?: { readonly total: number; readonly steal: number };
}

/** Samples the load now. */
export function sampleLoad(): LoadSample {
  let jiffies: LoadSample['jiffies'];
  try {
    const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal (guest time is counted in user already).
    jiffies = { total: fields.slice(0, 8).reduce((a, b) => a + b, 0), steal: fields[7] ?? 0 };
  } catch {
    jiffies = undefined;
  }
  return { load1: loadavg()[0]!, cores: cpus().length, jiffies };
}

/**
 * The load over a run, one line: the 1-minute load average at its start (what else ran on the
 * machine then) and at its end (this run's own processes included: scenario 2 forks five) against
 * the cores, and the share of CPU time a hypervisor stole meanwhile where readable. A start above
 * the cores means the run shared the machine, which slows every subject and bends ratios too.
 */
export function describeLoad(start: LoadSample, end: LoadSample): string {
  const steal =
    start.jiffies && end.jiffies && end.jiffies.total > start.jiffies.total
      ? `, steal ${(((end.jiffies.steal - start.jiffies.steal) / (end.jiffies.total - start.jiffies.total)) * 100).toFixed(1)} %`
      : '';
  const busy = start.load1 >= start.cores ? ' (busy before it began: read ratios with care)' : '';
  return `load ${start.load1.toFixed(2)} at the start → ${end.load1.toFixed(2)} at the end (its own processes included) on ${start.cores} cores${steal}${busy}`;
}
