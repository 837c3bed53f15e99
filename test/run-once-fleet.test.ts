/**
 * A fleet's scheduled job: five runner processes (fleet/runner.mjs) on each store, every store at
 * once, call `runOnce` for the same job at the start of each of 8 windows (2 s; 3 s on Cassandra
 * and 5 s on etcd, see WINDOW_MS), one of them with a clock 300 ms ahead of the others, each up to 50 ms late,
 * and one killed (SIGKILL) in the middle of the run; the job writes its window's number through
 * the store's fence with its token. Each window must run exactly once: never twice (the skewed
 * runner's early run keeps the others out for `lockAtLeastForMs`), never skipped while runners are
 * up (the next window's early run comes after that). About 50 s for the six stores. Then the
 * example app (examples/cron-fleet): three processes on croner's schedule for four slots, its own
 * tables read afterwards (about 10 s).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { matrixUrl } from '@deadbolt/conformance';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { scratchNamespace, type StoreKind } from './namespaces.js';

const RUNNER = fileURLToPath(new URL('fleet/runner.mjs', import.meta.url));
const EXAMPLE = fileURLToPath(new URL('../examples/cron-fleet/dist/main.js', import.meta.url));
/**
 * Each store and its window: a window must outlast `lockAtLeastForMs` as the store rounds it up (2 s
 * on etcd and Cassandra) and as it lets it lapse: etcd revokes an expired lease on its own schedule,
 * and on a loaded machine a 2 s window lock was still there when the next 3 s window began, so
 * every runner skipped that window (`ran-recently`).
 */
const WINDOW_MS: Record<Exclude<StoreKind, 'memory'>, number> = {
  redis: 2000,
  mysql: 2000,
  postgres: 2000,
  zookeeper: 2000,
  etcd: 5000,
  cassandra: 3000,
};
const WINDOWS = 8;
const SKEWS = [300, 0, 0, 0, 0];
/** The runner killed, and the window after whose run (and its `lockAtLeastForMs`) it is killed. */
const KILLED = 2;
const KILLED_AFTER = 3;

interface Line {
  readonly window: number;
  readonly late?: boolean;
  readonly ran?: boolean;
  readonly reason?: string;
  readonly result?: string;
}

/** Runs one process to its end; its lines, or its stderr in the error when it fails. */
function runner<L = Line>(
  settings: { readonly dieAfterWindow?: number; readonly [setting: string]: unknown },
  script = RUNNER,
  env?: NodeJS.ProcessEnv,
): Promise<L[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, JSON.stringify(settings)], { stdio: ['ignore', 'pipe', 'pipe'], env });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code, signal) =>
      code === 0 || (signal === 'SIGKILL' && settings.dieAfterWindow !== undefined)
        ? resolve(
            out
              .trim()
              .split('\n')
              .map((line) => JSON.parse(line) as L),
          )
        : reject(new Error(`runner exited with ${code}: ${err}`)),
    );
  });
}

describe.concurrent('runOnce across a fleet of processes', () => {
  for (const [kind, windowMs] of Object.entries(WINDOW_MS) as [Exclude<StoreKind, 'memory'>, number][]) {
    it(`${kind}: 5 runners, one 300 ms ahead, one killed, 8 windows: each window runs exactly once, its tokens rising`, async () => {
      const space = scratchNamespace(kind);
      await space.ready();
      const job = `fleet/${randomBytes(4).toString('hex')}`;
      const settings = {
        backend: space.child,
        // The CLI's reader makes the store's fence from the namespace's URL, as it makes the backend.
        fence: { ...space.child!, export: 'fenceFor' },
        job,
        windows: WINDOWS,
        windowMs,
        // Time for thirty runners to start and connect (seconds on a loaded machine).
        startAt: Date.now() + 10_000,
        jitterMs: 50,
        lockAtMostForMs: 6000,
        // Longer than the runners' spread (350 ms), shorter than the window less the skew (1 700 ms),
        // with room on both sides for a runner the loaded machine wakes late.
        lockAtLeastForMs: 1000,
      };
      try {
        const runs = await Promise.all(
          SKEWS.map((skewMs, i) => runner({ ...settings, skewMs, ...(i === KILLED ? { dieAfterWindow: KILLED_AFTER } : {}) })),
        );
        expect(Math.max(...runs[KILLED]!.map((l) => l.window)), 'the killed runner saw no window after its death').toBe(KILLED_AFTER);
        const ran: string[] = [];
        for (let window = 0; window < WINDOWS; window++) {
          const lines = runs.flatMap((lines) => lines.find((l) => l.window === window) ?? []);
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

  it('examples/cron-fleet: three processes, 4 slots of 2 s on croner: one run per slot fired, each stored with a higher token', async () => {
    const url = matrixUrl('postgres');
    const job = `example/${randomBytes(4).toString('hex')}`;
    const env = { ...process.env, DATABASE_URL: url, JOB: job, SLOTS: '4', SCHEDULE: '*/2 * * * * *' };
    type Fired = { slot: string; runner: string; ran?: boolean; reason?: string };
    const fired = (await Promise.all([0, 1, 2].map(() => runner<Fired>({}, EXAMPLE, env)))).flat();
    const db = new pg.Client({ connectionString: url });
    await db.connect();
    try {
      const runs = (await db.query('SELECT slot, token::text AS token FROM cron_fleet_runs WHERE job = $1 ORDER BY slot', [job])).rows as {
        slot: string;
        token: string;
      }[];
      const slots = [...new Set(fired.map((f) => f.slot))].sort();
      expect(
        runs.map((r) => r.slot),
        `one run for each slot fired: ${JSON.stringify(fired)}`,
      ).toEqual(slots);
      expect(slots.length).toBeGreaterThanOrEqual(4);
      for (const f of fired) if (!f.ran) expect(['busy', 'ran-recently']).toContain(f.reason);
      const tokens = runs.map((r) => BigInt(r.token));
      tokens.forEach((t, i) => i > 0 && expect(t).toBeGreaterThan(tokens[i - 1]!));
      const [result] = (await db.query('SELECT slot, token::text AS token FROM cron_fleet_result WHERE job = $1', [job])).rows as {
        slot: string;
        token: string;
      }[];
      expect(result).toEqual(runs.at(-1));
    } finally {
      await db.query('DELETE FROM cron_fleet_runs WHERE job = $1', [job]);
      await db.query('DELETE FROM cron_fleet_result WHERE job = $1', [job]);
      await db.end();
    }
  }, 60_000);
});
