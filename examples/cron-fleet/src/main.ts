// One process of a fleet that runs the same cron schedule (croner): every process fires at every
// slot, `runOnce` lets one of them run the job, and the job records its run in a table of the
// application's own, fenced with its token, so a runner whose claim ran out mid-job (a pause, a
// partition) cannot overwrite the result of a run that came after it. Start it three times:
//
//   node examples/cron-fleet/dist/main.js & node examples/cron-fleet/dist/main.js & node examples/cron-fleet/dist/main.js
//
// Settings from the environment: DATABASE_URL (the test-matrix PostgreSQL by default), JOB (the
// job's name, `report`), SCHEDULE (croner's pattern with seconds, every 2 s), SLOTS (how many
// slots to fire before exiting; 0, the default, runs until SIGINT or SIGTERM).
// test/example-cron-fleet.test.ts runs three for a few slots and reads the table.
import { Cron } from 'croner';
import { createLocker } from '@deadbolt/core';
import { postgresBackend } from '@deadbolt/postgres';
import pg from 'pg';

const url = process.env['DATABASE_URL'] ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const job = process.env['JOB'] ?? 'report';
const schedule = process.env['SCHEDULE'] ?? '*/2 * * * * *';
const slots = Number(process.env['SLOTS'] ?? 0);
const runner = `runner ${process.pid}`;

const db = new pg.Pool({ connectionString: url, max: 2 });
const locker = createLocker(postgresBackend({ url }));

// The application's tables: every run (one row per run, what the fleet must keep to one per slot)
// and the job's latest result, which only a higher token may replace. Three processes started
// together race to make them, and PostgreSQL's IF NOT EXISTS can then fail on its catalog's
// unique index: the loser finds the table made.
for (const table of [
  'cron_fleet_runs (job text, slot text, runner text, token bigint)',
  'cron_fleet_result (job text PRIMARY KEY, slot text, runner text, token bigint)',
])
  await db.query(`CREATE TABLE IF NOT EXISTS ${table}`).catch((error: { code?: string }) => {
    if (error.code !== '23505' && error.code !== '42P07') throw error;
  });

/** The job: its run logged, and its result stored unless a later run (a higher token) already stored one. */
async function report(slot: string, token: bigint): Promise<void> {
  await db.query('INSERT INTO cron_fleet_runs VALUES ($1, $2, $3, $4)', [job, slot, runner, token]);
  const stored = await db.query(
    `INSERT INTO cron_fleet_result AS r VALUES ($1, $2, $3, $4)
     ON CONFLICT (job) DO UPDATE SET slot = excluded.slot, runner = excluded.runner, token = excluded.token
     WHERE r.token < excluded.token`,
    [job, slot, runner, token],
  );
  if (stored.rowCount === 0) throw new Error(`slot ${slot}: a run with a higher token stored its result first; this one is stale`);
}

let fired = 0;
const cron = new Cron(schedule, { protect: true }, async (self) => {
  // The slot is the scheduled second, the same in every process whatever its scheduler's delay.
  const slot = new Date(Math.round((self.currentRun() ?? new Date()).getTime() / 1000) * 1000).toISOString();
  try {
    const outcome = await locker.runOnce(job, async ({ token }) => report(slot, token), {
      // A runner that dies mid-job holds the job at most this long.
      lockAtMostForMs: 30_000,
      // Longer than the fleet's spread of clocks and schedulers, shorter than a slot.
      lockAtLeastForMs: 1_000,
    });
    console.log(JSON.stringify({ slot, runner, ...(outcome.ran ? { ran: true, token: String(outcome.token) } : outcome) }));
  } catch (error) {
    console.error(`slot ${slot}: ${String(error)}`);
  }
  if (slots && ++fired >= slots) await stop();
});

async function stop(): Promise<void> {
  cron.stop();
  await locker.close();
  await db.end();
}
process.once('SIGINT', () => void stop());
process.once('SIGTERM', () => void stop());
