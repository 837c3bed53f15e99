// An uncontended Redis lock cycle counted in instructions, not timed: on this project's shared
// machines a cycle's time moves by a fifth between runs, so a change of a few percent is lost in
// timed runs, and valgrind's callgrind counts the same total for the same work every time.
//
//   node packages/bench/experiments/redis-cycle-instructions.mjs client
//     This process's own work per cycle with the network taken out: every subject runs on one
//     ioredis client whose socket is faked (each command is built and encoded as ioredis sends it,
//     and answered at once), so what is counted is the JavaScript a cycle runs: ioredis's command
//     building, the backend, core; the floor (`SET NX PX` + `DEL`) and redis-semaphore's `Mutex`
//     beside it, then a Redlock cycle over three faked nodes, ours (`redlock`, through a locker) and
//     `@sesamecare-oss/redlock`'s (`sesame`). Each subject runs twice under callgrind (node --predictable --single-threaded,
//     which makes V8's compiler and collector run on the main thread and the count repeat), for
//     20 000 and 40 000 cycles; the difference over 20 000 is its count per cycle. About 6 minutes.
//   node packages/bench/experiments/redis-cycle-instructions.mjs server [--parts]
//     The server's work per cycle: a private redis-server (from PATH, on a free port) runs under
//     callgrind, and each subject's 2 000 cycles are counted between two of its dumps. `--parts`
//     then takes the backend's two scripts apart (see below). About a minute.
//
// Needs valgrind (Debian: `apt-get install valgrind`) and `pnpm build`.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';

const SUBJECTS = ['floor', 'peer', 'backend', 'locker', 'redlock', 'sesame'];
/** The subjects that run on three faked clients (Redlock's nodes) rather than one. */
const NODES = ['redlock', 'sesame'];
const [mode, subject, cycles] = process.argv.slice(2);

/**
 * A subject's cycle on `client` (see the subjects' names above). Each loads only what it runs: a
 * process with more code loaded spends more on every garbage collection, and so per cycle.
 */
async function cycleOf(name, client) {
  if (name === 'floor') return () => client.set('k', 'x', 'NX', 'PX', 10_000).then(() => client.del('k'));
  if (name === 'peer') {
    const { Mutex } = await import('redis-semaphore');
    return async () => {
      const mutex = new Mutex(client, 'peer', { lockTimeout: 10_000 });
      await mutex.acquire();
      await mutex.release();
    };
  }
  if (name === 'sesame') {
    const { Redlock } = await import('@sesamecare-oss/redlock');
    const redlock = new Redlock(client.nodes);
    return async () => (await redlock.acquire(['sesame'], 10_000)).release();
  }
  const { redisBackend, redlockBackend } = await import('@deadbolt/redis');
  if (name === 'redlock') {
    const { createLocker } = await import('@deadbolt/core');
    const locker = createLocker(redlockBackend({ nodes: client.nodes, maxTtlMs: 15_000 }), { ttlMs: 10_000 });
    return async () => (await locker.lock('k')).release();
  }
  const backend = redisBackend({ client });
  if (name === 'backend') {
    return async () => backend.release(await backend.acquire({ key: 'k', owner: randomUUID(), ttlMs: 10_000, wait: false }));
  }
  const { createLocker } = await import('@deadbolt/core');
  const locker = createLocker(backend, { ttlMs: 10_000 });
  return async () => (await locker.lock('k')).release();
}

/** The answer a faked server gives `command`: a grant's token, a release's 1, the eviction check's settings, OK. */
let token = 1_790_000_000_000_000;
function answer(command, peer) {
  if (command.name === 'config') return ['maxmemory', '0', 'maxmemory-policy', 'noeviction'];
  if (command.name !== 'evalsha') return Buffer.from('OK');
  if (peer) return 1;
  const { args } = command;
  if (args[Number(args[1]) + 3] === '0') return 1;
  // An acquire that asks for a least token (Redlock's proposal) is granted that token, as a node
  // whose clock and counter are below it would: every node then agrees and nothing is lifted.
  const least = /^\*.*\|(\d+)$/.exec(args[Number(args[1]) + 4] ?? '')?.[1];
  return Buffer.from(least ?? String(token++));
}

if (mode === '--child') {
  const socket = { write: () => true };
  const faked = (port) => {
    const client = new Redis({ lazyConnect: true, port });
    client.sendCommand = (command) => {
      command.toWritable(socket);
      command.resolve(answer(command, subject === 'peer' || subject === 'sesame'));
      return command.promise;
    };
    return client;
  };
  const client = faked(6379);
  // Redlock's subjects: three nodes on ports of their own (a node named twice is refused).
  if (NODES.includes(subject)) client.nodes = [7001, 7002, 7003].map(faked);
  const cycle = await cycleOf(subject, client);
  for (let i = 0; i < Number(cycles); i++) await cycle();
  process.exit(0);
}

/** Instructions callgrind counted for `node <this file> --child <name> <n>`. */
function countChild(name, n) {
  const args = ['--tool=callgrind', '--callgrind-out-file=/dev/null', process.execPath, '--predictable', '--single-threaded'];
  // valgrind prints its summary on stderr.
  const { stderr } = spawnSync('valgrind', [...args, fileURLToPath(import.meta.url), '--child', name, String(n)], { encoding: 'utf8' });
  return Number(/refs:\s+([\d,]+)/.exec(stderr)[1].replaceAll(',', ''));
}

if (mode === 'client') {
  for (const name of SUBJECTS) {
    const perCycle = (countChild(name, 40_000) - countChild(name, 20_000)) / 20_000;
    console.log(`${String(Math.round(perCycle)).padStart(7)} instructions per cycle  ${name}`);
  }
} else if (mode === 'server') {
  const port = await new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port: free } = probe.address();
      probe.close(() => resolve(free));
    });
  });
  const dir = mkdtempSync(join(tmpdir(), 'redis-instructions-'));
  const server = spawn(
    'valgrind',
    ['--tool=callgrind', `--callgrind-out-file=${dir}/out`, 'redis-server', '--port', String(port), '--save', '', '--appendonly', 'no'],
    { stdio: 'ignore' },
  );
  const client = new Redis({ port, retryStrategy: () => 200 });
  client.on('error', () => undefined);
  await client.ping();
  const { scripts } = await import('../../backend-redis/dist/store.js');
  for (const s of [scripts.acquire, scripts.release]) await client.script('LOAD', s.source);
  // callgrind_control zeroes the counters and dumps them (a new numbered file each time).
  const control = (flag) => execFileSync('callgrind_control', [flag, String(server.pid)], { stdio: 'ignore' });
  const counted = () => {
    control('-d');
    const file = readdirSync(dir)
      .filter((f) => f !== 'out')
      .sort((a, b) => Number(a.split('.').pop()) - Number(b.split('.').pop()))
      .pop();
    const text = readFileSync(join(dir, file), 'utf8');
    rmSync(join(dir, file));
    return Number(/(?:summary|totals): (\d+)/.exec(text)[1]);
  };
  // The same scripts and arguments the backend sends (its own client adds nothing the server sees).
  const keys = ['lock', 'token', 'queue', 'wait'].map((part) => `deadbolt:{instructions}${part}:k`);
  const id = randomUUID();
  const cycles = {
    floor: await cycleOf('floor', client),
    peer: await cycleOf('peer', client),
    'the backend': async () => {
      const owner = randomUUID();
      await client.evalsha(scripts.acquire.sha, 4, [...keys, owner, '10000', `+11|${id}|10000|0`]);
      await client.evalsha(scripts.release.sha, 4, [...keys, owner, '0', `-01|${id}|0|0`]);
    },
  };
  const n = 2000;
  /** The server's instructions per call of `step`, less those of `helper` (run beside it to set the stage), measured apart. */
  const perCall = async (step, helper) => {
    const times = async (fn) => {
      for (let i = 0; i < 100; i++) await fn();
      control('-z');
      for (let i = 0; i < n; i++) await fn();
      return counted() / n;
    };
    return Math.round((await times(step)) - (helper ? await times(helper) : 0));
  };
  for (const [name, cycle] of Object.entries(cycles))
    console.log(`${String(await perCall(cycle)).padStart(7)} server instructions per cycle  ${name}`);
  if (subject === '--parts') {
    // The backend's two scripts taken apart: the acquire's common case (up to its `return token`)
    // as it is and without each of the token's two steps, then the release's common case, each
    // beside the command that resets its key (measured apart and subtracted).
    const { ACQUIRE, RELEASE } = await import('../../backend-redis/dist/scripts.js');
    const common = (source, after) => source.slice(0, source.indexOf('end\n', source.indexOf(after)) + 4) + '\nreturn false';
    const acquire = common(ACQUIRE, 'return token');
    const clock = /local t = redis\.call\('TIME'\)[\s\S]*?local now_us = tonumber\(now_text\)\n/;
    const parts = {
      'a plain command (GET)': [() => client.get('missing')],
      'a script that does nothing (`return 1`), no keys or arguments': ['return 1', 0],
      'the same with four keys and three arguments': ['return 1', 4],
      "the acquire's common case": [acquire, 4, 'del'],
      // (a fixed clock: the counter then always stands above it, so the bump that follows is cut too)
      "  without TIME and the clock's digits": [
        acquire
          .replace(clock, "local now_text, now_us = '1790000000000000', 1790000000000000\n")
          .replace('if token_last and tonumber(token_last) >= token_n then', 'if false then'),
        4,
        'del',
      ],
      '  without the token counter write': [acquire.replace(/redis\.call\('SET', KEYS\[2\][^)]*\)/, 'nil'), 4, 'del'],
      "the release's common case": [common(RELEASE, 'return 1'), 4, 'set'],
    };
    for (const [name, [source, numKeys, reset]] of Object.entries(parts)) {
      if (typeof source === 'function') {
        console.log(`${String(await perCall(source)).padStart(7)} server instructions per call  ${name}`);
        continue;
      }
      const sha = await client.script('LOAD', source);
      const argv = (owner) => [...keys.slice(0, numKeys), ...(numKeys ? [owner, '10000', `+11|${id}|10000|0`] : [])];
      const owner = randomUUID();
      const stage =
        reset === 'set' ? () => client.set(keys[0], owner, 'PX', 10_000) : reset === 'del' ? () => client.del(keys[0]) : undefined;
      const step = async () => {
        await client.evalsha(sha, numKeys, argv(owner));
        if (stage) await stage();
      };
      console.log(`${String(await perCall(step, stage)).padStart(7)} server instructions per call  ${name}`);
    }
  }
  client.disconnect();
  server.kill();
  rmSync(dir, { recursive: true, force: true });
} else {
  console.error('usage: redis-cycle-instructions.mjs client | server');
  process.exit(2);
}
