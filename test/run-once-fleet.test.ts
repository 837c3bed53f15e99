/**
 * A fleet's scheduled job: five runner processes (fleet/runner.mjs) on each store, every store at
 * once, call `runOnce` for the same job at the start of each window (see FLEET: 50 windows of 2 s
 * on the stores that expire in milliseconds; on etcd and Cassandra, whose leases last whole seconds
 * and at least 2 s, 15 of 5 s and 22 of 3.5 s), one of them with a clock 300 ms ahead of the
 * others, each up to 50 ms late, and one killed (SIGKILL) a third of the way through; the job
 * writes its window's number through the store's fence with its token.
 *
 * The promise checked exactly: no run begins within `lockAtLeastForMs` of the run before it (the
 * skewed runner's early run keeps the others out), and the tokens rise run after run. What a loaded
 * machine may bend, bounded: a window with a runner on time should run once, but a run that began
 * late (its claim slow to come) legitimately covers the next window's first fires, a fire that
 * reached the store after `lockAtLeastForMs` runs the window a second time, and a store that did not
 * answer in time fails a fire; each of these may touch at most a tenth of the windows. About 110 s
 * for the six stores side by side. Then the example app (examples/cron-fleet): three processes on
 * croner's schedule for four slots, its own tables read afterwards (about 10 s).
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
 * Each store's windows. A window must outlast `lockAtLeastForMs` as the store rounds it up (to 2 s
 * on etcd and Cassandra) and as it lets it lapse: etcd revokes an expired lease on its own schedule,
 * and on a loaded machine a 2 s window lock was still there when the next 3 s window began, so
 * every runner skipped that window (`ran-recently`). Each store's run lasts about 100 s.
 */
const FLEET: Record<Exclude<StoreKind, 'memory'>, { readonly windowMs: number; readonly windows: number }> = {
  redis: { windowMs: 2000, windows: 50 },
  mysql: { windowMs: 2000, windows: 50 },
  postgres: { windowMs: 2000, windows: 50 },
  zookeeper: { windowMs: 2000, windows: 50 },
  etcd: { windowMs: 5000, windows: 15 },
  cassandra: { windowMs: 3500, windows: 22 },
};
const SKEWS = [300, 0, 0, 0, 0];
/** A fire this much after its time is late: the runner does not call (a cron's missed fire). */
const LATE_MS = 150;
/**
 * Longer than the runners' spread (the skew, the jitter and LATE_MS: 500 ms) with 300 ms to spare
 * for a round trip, and shorter than the shortest window less the skew by 900 ms, room for a run
 * that began late on a loaded machine.
 */
const AT_LEAST_MS = 800;
/** The runner killed (after its window a third of the way through, and that window's `lockAtLeastForMs`). */
const KILLED = 2;

interface Line {
  readonly window: number;
  readonly late?: boolean;
  readonly ran?: boolean;
  readonly reason?: string;
  readonly result?: string;
  readonly error?: string;
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
  for (const [kind, { windowMs, windows }] of Object.entries(FLEET) as [Exclude<StoreKind, 'memory'>, (typeof FLEET)['redis']][]) {
    const killedAfter = Math.floor(windows / 3);
    it(`${kind}: 5 runners, one 300 ms ahead, one killed, ${windows} windows: no run within lockAtLeastForMs of another, tokens rising, a window missed or run twice rarely`, async () => {
      const space = scratchNamespace(kind);
      await space.ready();
      const job = `fleet/${randomBytes(4).toString('hex')}`;
      const settings = {
        backend: space.child,
        // The CLI's reader makes the store's fence from the namespace's URL, as it makes the backend.
        fence: { ...space.child!, export: 'fenceFor' },
        job,
        windows,
        windowMs,
        // Time for thirty runners to start and connect (seconds on a loaded machine).
        startAt: Date.now() + 10_000,
        jitterMs: 50,
        lateMs: LATE_MS,
        lockAtMostForMs: 6000,
        lockAtLeastForMs: AT_LEAST_MS,
      };
      try {
        const lines = await Promise.all(
          SKEWS.map((skewMs, i) => runner({ ...settings, skewMs, ...(i === KILLED ? { dieAfterWindow: killedAfter } : {}) })),
        );
        expect(Math.max(...lines[KILLED]!.map((l) => l.window)), 'the killed runner saw no window after its death').toBe(killedAfter);
        const runs: { window: number; token: bigint; startedAt: number }[] = [];
        const bent = { unrun: 0, twice: 0, failed: 0, noneOnTime: 0 };
        const notes: string[] = [];
        for (let window = 0; window < windows; window++) {
          const fires = lines.flatMap((runner) => runner.find((l) => l.window === window) ?? []);
          const onTime = fires.filter((l) => !l.late && !l.error);
          for (const l of onTime) if (!l.ran) expect(['busy', 'ran-recently']).toContain(l.reason);
          const won = onTime.filter((l) => l.ran);
          if (fires.some((l) => l.error)) bent.failed++;
          if (onTime.length === 0) bent.noneOnTime++;
          else if (won.length === 0) bent.unrun++;
          if (won.length > 1) bent.twice++;
          if (won.length !== 1) notes.push(`window ${window}: ${JSON.stringify(fires)}`);
          for (const { result } of won) {
            const [token, startedAt] = result!.split(' ');
            runs.push({ window, token: BigInt(token!), startedAt: Number(startedAt) });
          }
        }
        runs.sort((a, b) => a.startedAt - b.startedAt);
        for (let i = 1; i < runs.length; i++) {
          const [before, run] = [runs[i - 1]!, runs[i]!];
          // The promise: nobody runs the job again within lockAtLeastForMs of a run's start (the
          // ms of slack: both times are read in processes, the store counts from its own send).
          expect(
            run.startedAt - before.startedAt,
            `run ${i} (window ${run.window}) after window ${before.window}'s`,
          ).toBeGreaterThanOrEqual(AT_LEAST_MS - 5);
          expect(run.token).toBeGreaterThan(before.token);
        }
        console.log(`[fleet] ${kind}: ${runs.length} runs in ${windows} windows; bent: ${JSON.stringify(bent)}`);
        const tenth = Math.ceil(windows / 10);
        for (const [what, count] of Object.entries(bent))
          expect(count, `windows ${what} (at most a tenth): ${JSON.stringify(bent)}\n${notes.join('\n')}`).toBeLessThanOrEqual(tenth);
      } finally {
        await space.purge();
      }
    }, 180_000);
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
