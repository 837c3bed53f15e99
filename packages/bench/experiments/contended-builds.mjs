// Scenario 3's loop (N clients, one key, 1 ms hold) for two or more builds of deadbolt, run one
// after the other in alternating order, with the client process's CPU per hold and the store's
// transactions per hold where the store counts them (PostgreSQL). The benchmark's own before/after
// comparison runs two builds of the bench too; this one holds the measuring code fixed, so a
// difference is the library's. Each build is a checkout's root with `pnpm build` done, e.g. a
// `git worktree add ../before <rev>` beside this one.
// Run: node packages/bench/experiments/contended-builds.mjs <backend> '<options json>' <clients> <seconds> <pairs> <root>...
// e.g. node packages/bench/experiments/contended-builds.mjs postgres '{"connectionLimit":1}' 8 5 6 . ../before
// (the store's address: test-matrix's, as the bench takes it)
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { urls } from '../dist/subjects.js';

const [backend, optionsJson, clientsArg, secondsArg, pairsArg, ...roots] = process.argv.slice(2);
const child = process.env.CONTENDED_BUILDS_CHILD;

if (child) {
  // One measurement in a fresh process: the build at `child`.
  const load = (pkg) => import(pathToFileURL(path.join(child, 'packages', pkg, 'dist/index.js')).href);
  const core = await load('core');
  const store = await load(`backend-${backend}`);
  const options = { url: urls[backend], ...JSON.parse(optionsJson) };
  const lockers = Array.from({ length: Number(clientsArg) }, () =>
    core.createLocker(store[`${backend}Backend`](options), { ttlMs: 10_000 }),
  );
  const key = `contended-builds:${process.pid}`;
  const segment = async (ms) => {
    let holds = 0;
    const started = performance.now();
    await Promise.all(
      lockers.map(async (locker) => {
        while (performance.now() < started + ms) {
          const held = await locker.lock(key);
          await new Promise((resolve) => setTimeout(resolve, 1));
          await held.release();
          holds++;
        }
      }),
    );
    return { holds, seconds: (performance.now() - started) / 1000 };
  };
  const transactions = () =>
    backend === 'postgres'
      ? Number(
          execFileSync('psql', [
            '-At',
            urls.postgres,
            '-c',
            'select xact_commit + xact_rollback from pg_stat_database where datname = current_database()',
          ]).toString(),
        )
      : NaN;
  await segment(1000);
  const before = transactions();
  const cpu = process.cpuUsage();
  const { holds, seconds } = await segment(Number(secondsArg) * 1000);
  const used = process.cpuUsage(cpu);
  const xacts = transactions() - before;
  console.log(
    JSON.stringify({ holdsPerSecond: holds / seconds, cpuUsPerHold: (used.user + used.system) / holds, xactsPerHold: xacts / holds }),
  );
  await Promise.all(lockers.map((l) => l.close()));
} else {
  const runs = new Map(roots.map((root) => [root, []]));
  for (let pair = 0; pair < Number(pairsArg); pair++) {
    // Alternate the order, so neither build always runs on a machine the other just warmed.
    for (const root of pair % 2 ? [...roots].reverse() : roots) {
      const out = execFileSync(process.execPath, [process.argv[1], ...process.argv.slice(2)], {
        env: { ...process.env, CONTENDED_BUILDS_CHILD: path.resolve(root) },
      });
      runs.get(root).push(JSON.parse(out.toString()));
    }
  }
  const mean = (rows, field) => rows.reduce((sum, r) => sum + r[field], 0) / rows.length;
  for (const [root, rows] of runs) {
    console.log(
      `${root}: holds/s ${rows.map((r) => Math.round(r.holdsPerSecond)).join(' ')} (mean ${Math.round(mean(rows, 'holdsPerSecond'))}); ` +
        `client CPU ${Math.round(mean(rows, 'cpuUsPerHold'))} µs/hold; store transactions ${mean(rows, 'xactsPerHold').toFixed(2)}/hold`,
    );
  }
}
