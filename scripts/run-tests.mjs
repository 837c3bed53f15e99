// Runs every test file in lanes, then the server restarts, then writes the conformance matrix.
//   node scripts/run-tests.mjs [file...]
// The servers must be up and the packages built (scripts/test.sh does both first).
//
// Why lanes. Most of the suite's time is spent waiting (ttls running out, timeouts, grace
// periods), not computing, so the test files run in several vitest processes side by side, one
// file at a time in each. Two things decide where a file goes:
// - Time: the lanes are balanced by the durations test-matrix/results/slowest.md records.
// - Restarts: a test that restarts a server breaks whatever else uses that server at that moment,
//   and every store here is used by several files (its own suite, the migration pairs, the
//   rollout). So no lane restarts a shared server: such tests (their names say "server restart")
//   are left out of the lanes and run afterwards, one at a time, in a phase of their own. Nothing
//   else a test does reaches beyond its own keys and connections (each test takes fresh keys, and a
//   harness that breaks connections breaks only its backend's), except on the servers one lane
//   has to itself: the Redis Cluster, the Redlock nodes and the replica pair are all in the redis
//   lane, and their restarts run there.
// A test file no lane names runs in the `other` lane, so a new file is never left out.
//
// With file arguments, or DEADBOLT_BACKENDS set locally, the files given run in one vitest process,
// as before lanes existed, without the tests that restart a server unless DEADBOLT_RESTARTS=1.
import { spawn } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const results = join(root, 'test-matrix/results');

/**
 * Test files by lane; each lane's files run one after another. Four lanes on the two-core machine:
 * five made its load average 9-12 and timing bounds failed on load alone. Cassandra's suites run in
 * one lane, one at a time, except the cassandra -> redis pair: two heavy Cassandra files at once
 * starved Cassandra's polling waiters (24a). PostgreSQL's suites, the mysql -> postgres pair
 * included, run in one lane too: each opens hundreds of connections at once (session mode), and
 * PostgreSQL starts a process for each (5 ms on this machine when idle); two such files at once on
 * a loaded machine made connects outlast the 2 s connect timeout.
 */
const LANES = {
  cassandra: [
    'packages/backend-cassandra/test/conformance.test.ts',
    'packages/backend-cassandra/test/conformance-lwt.test.ts',
    'packages/backend-cassandra/test/conformance-shadow.test.ts',
    'packages/backend-cassandra/test/cassandra.test.ts',
    // Redis's, not Cassandra's: the example backend of docs/writing-a-backend.md, in the lane that ends first.
    'test/example-backend.test.ts',
    // The packages packed and installed with npm as a user would (about 110 s), in the lane that ends first.
    'test/packaging.test.ts',
    // runOnce across five runner processes on each of the six stores at once, and the cron-fleet
    // example's three (about 100 s), here for the same reason.
    'test/run-once-fleet.test.ts',
  ],
  sql: [
    'packages/backend-postgres/test/conformance.test.ts',
    'packages/backend-mysql/test/conformance.test.ts',
    'packages/backend-postgres/test/conformance-pgbouncer.test.ts',
    'test/migration-mysql-postgres.test.ts',
    // MySQL's, and the longest lane's no more (about 4 minutes).
    'test/migration-mysql-zookeeper.test.ts',
    'packages/backend-mysql/test/mysql.test.ts',
    'packages/backend-postgres/test/postgres.test.ts',
    'packages/backend-postgres/test/pgbouncer.test.ts',
    'packages/backend-postgres/test/fence.test.ts',
    'packages/backend-mysql/test/fence.test.ts',
  ],
  redis: [
    'test/migration-redis-etcd.test.ts',
    // The memory backend's suites (about 45 s), here to keep the lanes even.
    'packages/conformance/test/memory.test.ts',
    'packages/conformance/test/migration-memory.test.ts',
    'packages/backend-redis/test/conformance.test.ts',
    'packages/backend-redis/test/cluster.test.ts',
    'packages/backend-redis/test/redlock.test.ts',
    'packages/backend-redis/test/replica.test.ts',
    'packages/backend-redis/test/redis.test.ts',
    'packages/backend-redis/test/readme.test.ts',
    // The suite's client-facing groups on an iovalkey client (about 40 s).
    'packages/backend-redis/test/conformance-valkey.test.ts',
    // The command line on every store (about 55 s), in a lane that ends before `other`.
    'packages/cli/test/cli.test.ts',
    // `pnpm demo` on every store (about 30 s; 70 s under the full run's load).
    'test/demo.test.ts',
    // `deadbolt check` on every store (about 140 s); here because it checks the Redlock nodes,
    // which only this lane restarts.
    'packages/cli/test/check.test.ts',
  ],
  // The cassandra -> redis pair, etcd, ZooKeeper, core, bench, and any
  // file no lane names.
  other: [
    'test/migration-cassandra-redis.test.ts',
    // A rollout of child processes in each phase (about 3 minutes), here to keep the lanes even.
    'test/migration-rollout.test.ts',
    'packages/backend-etcd/test/conformance.test.ts',
    'packages/backend-zookeeper/test/conformance.test.ts',
    // The guides' examples compiled and their links checked (about 25 s).
    'test/docs.test.ts',
  ],
};

/**
 * The tests that need a shared server to themselves, by name (vitest's -t matches the full name):
 * those that restart one, those that count what the server itself counted (every client's
 * commands: the bench's floor check) while other lanes would be talking to it, and the cluster
 * fault runs (test/cluster-faults.test.ts: three-member clusters beside the lanes' load would
 * judge the machine, not the locks).
 */
const ALONE = '(server restart|server to itself|cluster fault)';

const vitest = join(root, 'node_modules/.bin/vitest');

/** Every test file vitest would find (vitest.config.ts: packages/*\/test/**, test/**). */
function allTestFiles() {
  const found = [];
  const walk = (dir) => {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.test.ts')) found.push(path);
    }
  };
  for (const pkg of readdirSync(join(root, 'packages'))) if (existsSync(join(root, 'packages', pkg, 'test'))) walk(`packages/${pkg}/test`);
  walk('test');
  return found.sort();
}

/** One vitest process over `files`, its output in `<name>.log` and its report in `vitest-<name>.json`. */
function runLane(name, files, args = []) {
  const log = join(results, `${name}.log`);
  const json = join(results, `vitest-${name}.json`);
  const started = performance.now();
  return new Promise((resolve) => {
    const child = spawn(vitest, ['run', '--reporter=default', '--reporter=json', `--outputFile.json=${json}`, ...args, ...files], {
      cwd: root,
      env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const write = (chunk) => appendFileSync(log, chunk);
    child.stdout.on('data', write);
    child.stderr.on('data', write);
    child.on('close', (code) => {
      const seconds = ((performance.now() - started) / 1000).toFixed(0);
      const summary = plain(readFileSync(log, 'utf8'))
        .split('\n')
        .filter((l) => /^\s*(Test Files|Tests)\s/.test(l))
        .map((l) => l.trim())
        .join('; ');
      console.log(`[test] ${name}: ${code === 0 ? 'passed' : 'FAILED'} in ${seconds} s (${summary || 'no summary'})`);
      if (code !== 0) console.log(failures(log));
      resolve({ name, code, json });
    });
  });
}

/** The failure section of a vitest log (or its tail), for the console. */
function failures(log) {
  const text = plain(readFileSync(log, 'utf8'));
  const at = text.search(/⎯+ Failed Tests|FAIL /);
  return (at >= 0 ? text.slice(at) : text.split('\n').slice(-60).join('\n')).slice(0, 20_000);
}

/** `text` without terminal colour codes. */
function plain(text) {
  return text.replace(/\u001b\[[0-9;]*m/g, '');
}

async function main() {
  mkdirSync(results, { recursive: true });
  for (const entry of readdirSync(results)) if (/^(vitest-.*\.json|.*\.log)$/.test(entry)) rmSync(join(results, entry));
  const given = process.argv.slice(2);
  const narrowed = process.env.DEADBOLT_BACKENDS && process.env.CI !== 'true';
  const started = performance.now();
  let runs;
  if (given.length > 0 || narrowed) {
    const files =
      given.length > 0
        ? given
        : [
            'packages/core',
            'packages/conformance',
            ...process.env.DEADBOLT_BACKENDS.split(',')
              .map((b) => `packages/backend-${b}`)
              .filter((d) => existsSync(join(root, d))),
          ];
    // A narrowed run is someone's local run, often beside servers other programs use (a Redis on
    // 6379 that was there before test-matrix): the tests that restart a server are left out unless
    // asked for, and said so, first.
    const restarts = process.env.DEADBOLT_RESTARTS === '1';
    if (!restarts)
      console.log(
        '[test] leaving out the tests that restart a server (they restart the shared test-matrix servers, whoever else uses them); DEADBOLT_RESTARTS=1 runs them',
      );
    else console.log('[test] DEADBOLT_RESTARTS=1: the tests that restart a server will restart the test-matrix servers they use');
    runs = [await runLane('all', files, restarts ? [] : ['-t', `^(?!.*${ALONE})`])];
  } else {
    const all = allTestFiles();
    const named = Object.values(LANES).flat();
    const missing = named.filter((f) => !all.includes(f));
    if (missing.length > 0) throw new Error(`lanes name test files that do not exist: ${missing.join(', ')}`);
    const lanes = { ...LANES, other: [...LANES.other, ...all.filter((f) => !named.includes(f))] };
    console.log(
      `[test] ${all.length} test files in ${Object.keys(lanes).length} lanes side by side, then the server restarts on their own (logs in ${relative(root, results)}/)`,
    );
    runs = await Promise.all(Object.entries(lanes).map(([name, files]) => runLane(name, files, ['-t', `^(?!.*${ALONE})`])));
    console.log(
      `[test] lanes done in ${((performance.now() - started) / 1000).toFixed(0)} s; now the tests that restart a server, one at a time`,
    );
    // Only files that may hold such a test: a conformance suite, or a test that says so.
    const restarting = all.filter((f) =>
      /defineConformanceSuite|server restart|server to itself|cluster fault/.test(readFileSync(join(root, f), 'utf8')),
    );
    // A server test-matrix did not start is someone else's: its restarts are n/a (restartRefusal).
    const { restartRefusal } = await import(pathToFileURL(join(root, 'packages/conformance/dist/test-matrix.js')).href);
    const refused = ['redis', 'mysql', 'postgres', 'zookeeper', 'etcd', 'cassandra'].map(restartRefusal).filter(Boolean);
    if (refused.length > 0) console.log(`[test] not restarting (their restart behaviours are listed n/a): ${refused.join('; ')}`);
    runs.push(await runLane('restarts', restarting, ['-t', ALONE]));
  }
  console.log(`[test] all tests in ${((performance.now() - started) / 1000).toFixed(0)} s`);
  const matrix = spawn(process.execPath, [join(root, 'test-matrix/matrix.mjs'), ...runs.map((r) => r.json).filter((j) => existsSync(j))], {
    cwd: root,
    stdio: 'inherit',
  });
  const matrixCode = await new Promise((resolve) => matrix.on('close', resolve));
  process.exit(runs.some((r) => r.code !== 0) || matrixCode !== 0 ? 1 : 0);
}

await main();
