/**
 * A fleet's scheduled job: five runner processes (fleet/runner.mjs) call `runOnce` for the same job
 * at the start of each of 8 two-second windows, one of them with a clock 300 ms ahead of the
 * others and each up to 50 ms late; the job writes its window's number through the store's fence
 * with its token. Each window must run exactly once: never twice (the skewed runner's early run
 * keeps the others out for `lockAtLeastForMs`), never skipped while runners are up (the next
 * window's early run comes after that). On Redis and PostgreSQL (ttl leases) and ZooKeeper (a
 * session lease: the window's lock is given back by its runner). About 22 s a store.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { matrixUrl } from '@deadbolt/conformance';
import { describe, expect, it } from 'vitest';
import { scratchNamespace, type StoreKind } from './namespaces.js';

const RUNNER = fileURLToPath(new URL('fleet/runner.mjs', import.meta.url));
const FENCES: Partial<Record<Exclude<StoreKind, 'memory'>, [string, string]>> = {
  redis: ['@deadbolt/redis', 'redisFence'],
  postgres: ['@deadbolt/postgres', 'postgresFence'],
  zookeeper: ['@deadbolt/zookeeper', 'zookeeperFence'],
};
const WINDOWS = 8;
const WINDOW_MS = 2000;
const SKEWS = [300, 0, 0, 0, 0];

interface Line {
  readonly window: number;
  readonly late?: boolean;
  readonly ran?: boolean;
  readonly reason?: string;
  readonly result?: string;
}

/** Runs one runner to its end; its lines, or its stderr in the error when it fails. */
function runner(settings: object): Promise<Line[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [RUNNER, JSON.stringify(settings)], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0
        ? resolve(
            out
              .trim()
              .split('\n')
              .map((line) => JSON.parse(line) as Line),
          )
        : reject(new Error(`runner exited with ${code}: ${err}`)),
    );
  });
}

describe('runOnce across a fleet of processes', () => {
  for (const kind of Object.keys(FENCES) as Exclude<StoreKind, 'memory'>[]) {
    it(`${kind}: 5 runners, one 300 ms ahead, 8 windows: each window runs exactly once, its tokens rising`, async () => {
      const space = scratchNamespace(kind);
      await space.ready();
      const [module, name] = FENCES[kind]!;
      const job = `fleet/${randomBytes(4).toString('hex')}`;
      const settings = {
        backend: space.child,
        fence: { module, export: name, options: { url: matrixUrl(kind) } },
        job,
        windows: WINDOWS,
        windowMs: WINDOW_MS,
        // Time for every runner to start and connect (seconds on a loaded machine).
        startAt: Date.now() + 6000,
        jitterMs: 50,
        lockAtMostForMs: 6000,
        // Longer than the runners' spread (350 ms), shorter than the window less the skew (1 700 ms),
        // with room on both sides for a runner the loaded machine wakes late.
        lockAtLeastForMs: 1000,
      };
      try {
        const runs = await Promise.all(SKEWS.map((skewMs) => runner({ ...settings, skewMs })));
        const ran: string[] = [];
        for (let window = 0; window < WINDOWS; window++) {
          const lines = runs.map((lines) => lines.find((l) => l.window === window)!);
          const winners = lines.filter((l) => l.ran);
          const fired = lines.filter((l) => !l.late).length;
          expect(winners.length, `window ${window}: ${JSON.stringify(lines)}`).toBe(fired > 0 ? 1 : 0);
          for (const l of lines) if (!l.ran && !l.late) expect(['busy', 'ran-recently']).toContain(l.reason);
          if (winners[0]) ran.push(winners[0].result!);
        }
        expect(ran.length, 'windows run (a window is left out only when every runner was late for it)').toBeGreaterThanOrEqual(WINDOWS - 1);
        const tokens = ran.map(BigInt);
        tokens.forEach((t, i) => i > 0 && expect(t).toBeGreaterThan(tokens[i - 1]!));
      } finally {
        await space.purge();
      }
    }, 90_000);
  }
});
