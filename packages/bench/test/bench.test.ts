import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { contendedResult, longHolds, openContended, uncontended } from '../dist/scenarios.js';
import { openProbe } from '../dist/stores.js';
import { floors, subjects } from '../dist/subjects.js';

/** `pnpm bench args…` as the built CLI, writing its results under a fresh directory `out`. */
async function runBench(args: string[], env: Record<string, string> = {}, timeout = 60_000) {
  const out = mkdtempSync(join(tmpdir(), 'deadbolt-bench-'));
  const cli = new URL('../dist/cli.js', import.meta.url).pathname;
  const ran = await promisify(execFile)(process.execPath, [cli, ...args], { env: { ...process.env, INIT_CWD: out, ...env }, timeout });
  // Every table is in the run's summary.md; stdout is one screen (checked in its own test).
  const [run] = readdirSync(join(out, 'bench-results'));
  return { ...ran, out, summary: readFileSync(join(out, 'bench-results', run!, 'summary.md'), 'utf8') };
}

describe('bench', () => {
  // The count is every client's: the test runner gives it the server to itself (its name says so).
  it("counts store requests from the server's own counter (the server to itself): the Redis floor is exactly SET + DEL per cycle", async () => {
    const probe = await openProbe('redis');
    try {
      expect(await probe.version()).toMatch(/^Redis \d+\.\d+/);
      const client = await floors.redis!.client();
      const { results, failures } = await uncontended([{ name: 'redis floor', client, cycles: 300 }], probe);
      await client.close();
      expect(failures).toEqual([]);
      expect(results).toHaveLength(1);
      expect(results[0]!.cycles).toBe(300);
      expect(results[0]!.storeRequestsPerCycle).toBe(2);
    } finally {
      await probe.close();
    }
  });

  it('scenario 1 interleaves the subjects of a store; one that fails is reported and the others finish', async () => {
    const memory = await subjects()
      .find((s) => s.name === 'deadbolt memory')!
      .client();
    let attempts = 0;
    const broken = {
      acquire: async () => {
        if (++attempts > 150) throw new Error('store went away');
        return { release: async () => undefined };
      },
      close: async () => undefined,
    };
    const { results, failures } = await uncontended([
      { name: 'memory', client: memory, cycles: 1000 },
      { name: 'broken', client: broken, cycles: 1000 },
    ]);
    await memory.close();
    expect(results.map((r) => [r.subject, r.cycles])).toEqual([['memory', 1000]]);
    expect(failures).toMatchObject([{ name: 'broken', error: { message: 'store went away' } }]);
    // The broken client ran its warm-up (100 cycles) and failed halfway through its first timed block
    // of 100; no later round called it again.
    expect(attempts).toBe(151);
  });

  it('scenario 3 gives up a wait still pending a grace period after its segment ended, and counts it as a wait that long at least', async () => {
    // A peer that retries in a loop of its own and never wins, as a livelocked Redlock does.
    const livelocked = {
      name: 'livelocked',
      store: 'memory' as const,
      client: async () => ({
        acquire: async (_key: string, signal?: AbortSignal): Promise<never> => {
          for (;;) {
            signal?.throwIfAborted();
            await new Promise((resolve) => setTimeout(resolve, 5));
          }
        },
        close: async () => undefined,
      }),
    };
    const session = await openContended(livelocked, 2, 1, 200, 50, 300);
    try {
      const started = performance.now();
      const segment = await session.run(0);
      const took = performance.now() - started;
      expect(took).toBeGreaterThanOrEqual(490);
      expect(took).toBeLessThan(2000);
      expect(segment.records).toEqual([]);
      expect(segment.gaveUp).toHaveLength(2);
      const result = contendedResult('livelocked', 2, 1, [segment]);
      expect(result.gaveUp).toBe(2);
      expect(result.wait.max).toBeGreaterThanOrEqual(490);
    } finally {
      await session.close();
    }
  });

  it('scenario 5 on Redis: no lock lost while held; every injected loss aborts lock.signal within a renewal period', async () => {
    const redis = subjects().find((s) => s.name === 'deadbolt redis')!;
    const probe = await openProbe('redis');
    try {
      const result = await longHolds(redis, 3, 1500, probe);
      expect(result).toMatchObject({ locks: 3, ttlMs: 2000, lostWhileHeld: 0, unnoticed: 0 });
      expect(result.lossToAbort!.count).toBe(3);
      expect(result.lossToAbort!.max).toBeLessThan(2000 / 3 + 250);
      // Renewal every ttl/3 is 90 per minute: 2 or 3 renewals per lock in the 1.5 s window.
      expect(result.renewalsPerMinute).toBeGreaterThan(60);
      expect(result.renewalsPerMinute).toBeLessThan(130);
      expect(result.storeRequestsPerMinute).toBeGreaterThanOrEqual(result.renewalsPerMinute);
    } finally {
      await probe.close();
    }
  }, 60_000);

  it('`pnpm bench` runs on the memory backend alone when no store answers, and writes its three files', async () => {
    const { stdout, stderr, out, summary } = await runBench(
      ['--only', 'memory,redis'],
      // A heartbeat every second here (5 s by default): the quick memory steps last a few seconds.
      { DEADBOLT_REDIS_URL: 'redis://127.0.0.1:1', DEADBOLT_BENCH_HEARTBEAT_MS: '1000' },
      120_000,
    );
    expect(summary).toContain('redis not running (skipped)');
    // Why it was left out, with the store's address; and the scenarios that need a store say so.
    expect(stderr).toContain('[bench] left out redis: redis at 127.0.0.1:1 is unavailable');
    expect(stdout).toContain('left out redis: redis at 127.0.0.1:1 is unavailable');
    expect(summary).toContain('none answered (left out: redis;');
    // Not a terminal: a progress line per step (and while one runs, every 5 s), with the time left
    // from the second step on, and the end.
    const lines = stderr.split('\n').filter((line) => /^\[bench\] \d+\/\d+, \d+:\d\d/.test(line));
    const steps = lines.filter((line) => !line.endsWith('in this step)'));
    expect(steps.length).toBeGreaterThan(3);
    // While a step runs, a line at least every heartbeat, saying how long it has run.
    expect(lines.some((line) => / \(0:0[1-9] in this step\)$/.test(line))).toBe(true);
    // No long silence. Generous: the heartbeat is a timer in the benchmark's own process, late when
    // the process gets little CPU (one loaded CI run saw 8 s between two lines with a 1 s heartbeat).
    const times = lines.map((line) => /, (\d+):(\d\d)/.exec(line)!).map((m) => Number(m[1]) * 60 + Number(m[2]));
    expect(Math.max(...times.slice(1).map((t, i) => t - times[i]!))).toBeLessThanOrEqual(20);
    expect(steps[1]).toMatch(/, about \d+:\d\d left: /);
    expect(steps.at(-1)).toMatch(new RegExp(`^\\[bench\\] (\\d+)/\\1,`)); // the last step is the last of the count
    expect(stderr).toMatch(/\[bench\] done in \d+:\d\d/);
    expect(stderr).not.toMatch(/[ ,]\d+:[6-9]\d\b/); // no clock reads 0:60
    expect(summary).toMatch(/\| deadbolt memory \| \d+ \|/);
    expect(summary).not.toMatch(/\| deadbolt redis/);
    // Scenario 11's :00: of 200 calls of one job at once, it ran once.
    expect(summary).toMatch(/^\| memory \| .* \| once \/ [\d.]+ \/ [\d.]+ \|$/m);
    // One screen on stdout, the load beside it, and where every table is.
    expect(stdout.trim().split('\n').length).toBeLessThanOrEqual(30);
    expect(stdout).toMatch(
      /^deadbolt benchmark, quick profile: memory in \d+:\d\d; load [\d.]+ at the start → [\d.]+ at the end .* on \d+ cores/,
    );
    expect(summary).toMatch(/^The machine over this run: load [\d.]+ at the start → [\d.]+ at the end .* on \d+ cores/m);
    expect(stdout).toContain('summary.md');
    const [run] = readdirSync(join(out, 'bench-results'));
    expect(readdirSync(join(out, 'bench-results', run!)).sort()).toEqual(['report.html', 'results.json', 'summary.md']);
    const results = JSON.parse(readFileSync(join(out, 'bench-results', run!, 'results.json'), 'utf8'));
    expect(results.contended.length).toBeGreaterThan(0);
    expect(results.contended.every((r: { tokenOrderViolations: number }) => r.tokenOrderViolations === 0)).toBe(true);
    // Summaries only without --raw: no per-acquisition samples, and small.
    expect(results.contended[0].acquisitions).toBeUndefined();
    expect(statSync(join(out, 'bench-results', run!, 'results.json')).size).toBeLessThan(5 * 2 ** 20);
  }, 150_000);

  it('`pnpm bench --scenarios 1 --only memory` prints that scenario alone, and its ratio to the floor from the mean where a p50 is a few timer ticks', async () => {
    const { summary, out } = await runBench(['--only', 'memory', '--scenarios', '1', '--raw']);
    // --raw keeps every cycle's time in results.json.
    const [run] = readdirSync(join(out, 'bench-results'));
    const results = JSON.parse(readFileSync(join(out, 'bench-results', run!, 'results.json'), 'utf8'));
    expect(results.uncontended[0].cycleMs.length).toBeGreaterThan(1000);
    expect(summary.match(/^## Scenario \d/gm)).toEqual(['## Scenario 1']);
    const ratio = /\| deadbolt memory \| \d+ \| \d+ \| [\d.]+ \| [\d.]+ \| ([\d.]+)× \(mean\) \|/.exec(summary);
    expect(ratio, summary).not.toBeNull();
    expect(Number(ratio![1])).toBeGreaterThan(1);
  }, 90_000);

  it('scenario 1 on Redis counts the iovalkey row against a floor on iovalkey, and shows the client choice against ioredis', async () => {
    const { summary } = await runBench(['--only', 'redis', '--scenarios', '1']);
    const row = (name: string) => new RegExp(`^\\| ${name} \\| \\d+ \\| \\d+ \\| ([\\d.]+) \\| [\\d.]+ \\| ([\\d.]*)×?`, 'm').exec(summary);
    const floor = row('redis floor on iovalkey \\(SET NX PX \\+ DEL\\)');
    const ours = row('deadbolt redis on iovalkey');
    expect(floor, summary).not.toBeNull();
    expect(ours, summary).not.toBeNull();
    // The ratio printed is its p50 over the iovalkey floor's (both rounded as printed).
    expect(Number(ours![2])).toBeCloseTo(Number(ours![1]) / Number(floor![1]), 1);
    expect(summary).toMatch(/^\| deadbolt redis \| [\d.]+ → [\d.]+ ms \|/m);
  }, 90_000);

  it('`--scenarios 12` on memory: renewals grow with the locks held (one per lock per interval), none is lost, and a held lock takes under 2 KB of heap', async () => {
    const { summary, out } = await runBench(['--only', 'memory', '--scenarios', '12'], {}, 120_000);
    expect(summary.match(/^## Scenario \d+/gm)).toEqual(['## Scenario 12']);
    const [run] = readdirSync(join(out, 'bench-results'));
    const { held } = JSON.parse(readFileSync(join(out, 'bench-results', run!, 'results.json'), 'utf8')) as {
      held: { held: number; renewalsPerSecond: number; heapBytesPerLock: number; lostWhileHeld: number }[];
    };
    expect(held.map((p) => p.held)).toEqual([10, 100, 1000, 10_000]);
    for (const p of held) {
      // ttl 6 s, renewed every 2 s: held / 2 renewals a second, give or take a renewal round.
      expect(p.renewalsPerSecond).toBeGreaterThan((p.held / 2) * 0.6);
      expect(p.renewalsPerSecond).toBeLessThan((p.held / 2) * 1.4);
      expect(p.lostWhileHeld).toBe(0);
    }
    expect(held.at(-1)!.heapBytesPerLock).toBeLessThan(2048);
  }, 130_000);

  it('`--scenarios 13` on memory: every count of waiters hands over, in arrival order (fair), as often as the step asks', async () => {
    const { summary, out } = await runBench(['--only', 'memory', '--scenarios', '13'], {}, 120_000);
    expect(summary.match(/^## Scenario \d+/gm)).toEqual(['## Scenario 13']);
    const [run] = readdirSync(join(out, 'bench-results'));
    const { waiters } = JSON.parse(readFileSync(join(out, 'bench-results', run!, 'results.json'), 'utf8')) as {
      waiters: { waiters: number; handoffs: number; handoff?: { p99: number }; fairness?: number; cut?: string }[];
    };
    expect(waiters.map((p) => p.waiters)).toEqual([1, 10, 100, 1000]);
    for (const p of waiters) {
      expect(p.cut).toBeUndefined();
      // Memory hands over in microseconds: each count reaches its target of two grants per contender.
      expect(p.handoffs).toBeGreaterThanOrEqual(Math.max(50, 2 * (p.waiters + 1)));
      expect(p.handoff!.p99).toBeGreaterThan(0);
      // Memory's line is FIFO and the holder queues again at its back: every contender gets its turns.
      expect(p.fairness).toBeGreaterThan(0.9);
    }
  }, 130_000);

  it('`--scenarios 10` repeats scenarios 1 and 4 beside a neighbour that burns a core, reports client CPU, and leaves the neighbour stopped', async () => {
    // 28 s in a CI run, 60 s in another (four lanes beside it, and its own neighbour burning a core).
    const { summary, out } = await runBench(['--only', 'memory', '--scenarios', '10'], {}, 170_000);
    expect(summary.match(/^## Scenario \d+/gm)).toEqual(['## Scenario 10']);
    // Scenario 1 did not run, so the idle side is n/a; the busy side is measured.
    expect(summary).toMatch(/\| deadbolt memory \| n\/a → [\d.]+ \| n\/a → [\d.]+× \(mean\) \| n\/a → [\d.]+ \|/);
    expect(summary).toMatch(/\| deadbolt memory \| n\/a → \d+ \| n\/a → [\d.]+ \| n\/a → [\d.]+ \|/);
    const [run] = readdirSync(join(out, 'bench-results'));
    const results = JSON.parse(readFileSync(join(out, 'bench-results', run!, 'results.json'), 'utf8'));
    expect(results.busy.uncontended.find((r: { subject: string }) => r.subject === 'deadbolt memory').clientCpuUs).toBeGreaterThan(0);
    expect(results.busy.manyKeys[0].clientCpuUs).toBeGreaterThan(0);
    // The neighbour (a `node -e` loop) was stopped with its group, not left to its own deadline.
    const left = await promisify(execFile)('pgrep', ['-f', 'Math.sqrt\\(x \\+ 1\\)']).catch(() => ({ stdout: '' }));
    expect(left.stdout).toBe('');
  }, 180_000);

  it('`pnpm bench` rejects an unknown option before running anything, and --help prints the usage', async () => {
    const cli = new URL('../dist/cli.js', import.meta.url).pathname;
    const run = promisify(execFile);
    const bad = await run(process.execPath, [cli, '--scenario', '1'], { timeout: 60_000 }).catch(
      (error: { code: number; stderr: string }) => error,
    );
    expect(bad).toMatchObject({ code: 2 });
    expect((bad as { stderr: string }).stderr).toMatch(/Unknown option '--scenario'[\s\S]*usage: pnpm bench/);
    // A misspelt store or scenario: refused with the valid values, not a run of empty tables.
    for (const [flag, value, valid] of [
      ['--only', 'memroy', 'memory, redis'],
      ['--scenarios', '1,99', '1, 2, 3'],
    ]) {
      const wrong = await run(process.execPath, [cli, flag!, value!], { timeout: 60_000 }).catch(
        (error: { code: number; stderr: string }) => error,
      );
      expect(wrong, `${flag} ${value}`).toMatchObject({ code: 2 });
      expect((wrong as { stderr: string }).stderr).toContain(valid);
    }
    const help = await run(process.execPath, [cli, '--help'], { timeout: 60_000 });
    expect(help.stdout).toMatch(/^usage: pnpm bench/);
    // Each run loads every store's driver before it reads its options: over 10 s on a loaded CI
    // machine. The timeouts only end a run that hangs.
  }, 240_000);
});
