import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { contendedResult, longHolds, openContended, uncontended } from '../dist/scenarios.js';
import { openProbe } from '../dist/stores.js';
import { floors, subjects } from '../dist/subjects.js';

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
    const out = mkdtempSync(join(tmpdir(), 'deadbolt-bench-'));
    const cli = new URL('../dist/cli.js', import.meta.url).pathname;
    const { stdout } = await promisify(execFile)(process.execPath, [cli, '--only', 'memory,redis'], {
      env: { ...process.env, INIT_CWD: out, DEADBOLT_REDIS_URL: 'redis://127.0.0.1:1' },
      timeout: 120_000,
    });
    expect(stdout).toContain('redis not running (skipped)');
    expect(stdout).toMatch(/\| deadbolt memory \| \d+ \|/);
    expect(stdout).not.toMatch(/\| deadbolt redis/);
    const [run] = readdirSync(join(out, 'bench-results'));
    expect(readdirSync(join(out, 'bench-results', run!)).sort()).toEqual(['report.html', 'results.json', 'summary.md']);
    const results = JSON.parse(readFileSync(join(out, 'bench-results', run!, 'results.json'), 'utf8'));
    expect(results.contended.length).toBeGreaterThan(0);
    expect(results.contended.every((r: { tokenOrderViolations: number }) => r.tokenOrderViolations === 0)).toBe(true);
  }, 150_000);

  it('`pnpm bench` rejects an unknown option before running anything, and --help prints the usage', async () => {
    const cli = new URL('../dist/cli.js', import.meta.url).pathname;
    const run = promisify(execFile);
    const bad = await run(process.execPath, [cli, '--scenario', '1'], { timeout: 10_000 }).catch(
      (error: { code: number; stderr: string }) => error,
    );
    expect(bad).toMatchObject({ code: 2 });
    expect((bad as { stderr: string }).stderr).toMatch(/Unknown option '--scenario'[\s\S]*usage: pnpm bench/);
    const help = await run(process.execPath, [cli, '--help'], { timeout: 10_000 });
    expect(help.stdout).toMatch(/^usage: pnpm bench/);
  });
});
