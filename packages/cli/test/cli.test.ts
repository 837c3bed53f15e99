// The `deadbolt` binary as a shell runs it (the built dist/main.js in a child process), against the
// test-matrix servers: exit codes, the command's environment, signals passed on, the command
// stopped when its lock is lost, waits given up, `inspect` on a free, held and contended key
// on every store, `bench`, `release --force`, and `elect` (`--again` after a lost term), `leader` and `observe` on Redis and
// ZooKeeper. About 60 s, most of it Cassandra's and the waits' own time.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { matrixUrl, type MatrixServer } from '@deadbolt/conformance';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';

const BIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));
const REDIS = matrixUrl('redis');
const dir = mkdtempSync(join(tmpdir(), 'deadbolt-cli-'));
const started: ChildProcess[] = [];
let keySeq = 0;
const freshKey = () => `cli/${process.pid}/${++keySeq}`;

afterEach(() => {
  for (const child of started.splice(0)) child.kill('SIGKILL');
});

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** `deadbolt args…` in a child process; `env` adds to the environment. `stderr()`: what it wrote there so far. */
function deadbolt(args: string[], env: Record<string, string> = {}): { child: ChildProcess; done: Promise<Ran>; stderr: () => string } {
  const t0 = performance.now();
  const child = spawn(process.execPath, [BIN, ...args], {
    env: { ...process.env, DEADBOLT_URL: REDIS, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.push(child);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const done = once(child, 'exit').then(([code]) => ({ code: code as number | null, stdout, stderr, ms: performance.now() - t0 }));
  return { child, done, stderr: () => stderr };
}
const cli = (args: string[], env?: Record<string, string>) => deadbolt(args, env).done;

/** Resolves once `file` (written by a command) exists with content; its content. */
async function fileSoon(file: string, ms = 20_000): Promise<string> {
  const until = performance.now() + ms;
  for (;;) {
    try {
      const text = readFileSync(file, 'utf8');
      if (text.endsWith('\n')) return text;
    } catch {
      // not yet
    }
    if (performance.now() > until) throw new Error(`${file} was not written within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/**
 * `deadbolt inspect key` as text; fails the test with the command's stderr unless it exits 0. The
 * store gets 30 s to answer rather than the command's 10: a CI run with four lanes of tests on two
 * cores once saw a fresh process's connect and first inspect of Cassandra take more than 4 s twice
 * in a row, and what this test checks is the output, not how fast a process starts under that load.
 */
async function inspectText(url: string, key: string): Promise<string> {
  const ran = await cli(['inspect', key, '-u', url, '--timeout', '30']);
  expect(ran.code, ran.stderr).toBe(0);
  return ran.stdout;
}

/** Inspects `key` until `check` passes (a holder and waiter take a moment to show); the last answer. */
async function inspectUntil(
  url: string,
  key: string,
  check: (seen: { holders: { owner: string; token: string | null }[]; waiters: unknown[] | null; limit?: number }) => boolean,
  shared = false,
) {
  const until = performance.now() + 20_000;
  for (;;) {
    const ran = await cli(['inspect', key, '--json', '-u', url, '--timeout', '30', ...(shared ? ['-s'] : [])]);
    expect(ran.code, ran.stderr).toBe(0);
    const seen = JSON.parse(ran.stdout);
    if (check(seen) || performance.now() > until) return seen;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A one-line `deadbolt: …` report on stderr, no stack trace. */
function expectOneLine(ran: Ran): void {
  const lines = ran.stderr.trim().split('\n');
  expect(lines, ran.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^deadbolt: /);
  expect(ran.stderr).not.toMatch(/\n\s+at /);
}

describe('deadbolt run', () => {
  it('bad usage: 64 and one line, before any store is contacted', async () => {
    const bad = [
      [],
      ['frobnicate'],
      ['run'],
      ['run', 'k'],
      ['run', 'k', 'true'],
      ['run', 'k', '--bogus', '--', 'true'],
      ['run', 'k', '-w', 'soon', '--', 'true'],
      ['run', 'k', '--read', '-l', '2', '--', 'true'],
      ['run', 'k', '-x', '--write', '--', 'true'],
      ['run', 'k', '-s', '--', 'true'],
      ['run', 'k', '-E', '300', '--', 'true'],
      ['run', 'k', '-c', 'true', '--', 'true'],
      ['run', '-u', 'gopher://127.0.0.1:1', 'k', '--', 'true'],
      ['run', '-u', `${REDIS}?nosuch=1`, 'k', '--', 'true'],
      ['run', '-u', `${REDIS}?maxPollDelayMs=-5`, 'k', '--', 'true'],
      ['inspect'],
      ['inspect', 'a', 'b'],
      ['inspect', 'k', '--timeout', '0'],
      ['release', 'k', '--force', '--timeout', 'soon'],
    ];
    for (const args of bad) {
      const ran = await cli(args);
      expect(ran.code, args.join(' ')).toBe(64);
      if (args.length > 0) expectOneLine(ran);
    }
    const noStore = await cli(['run', 'k', '--', 'true'], { DEADBOLT_URL: '' });
    expect(noStore.code).toBe(64);
    expect(noStore.stderr).toMatch(/DEADBOLT_URL/);
    // A misspelt flag is named with the flag it probably meant, as a misspelt option is everywhere.
    const typo = await cli(['run', 'k', '--timout', '5', '--', 'true']);
    expect(typo.code).toBe(64);
    expect(typo.stderr).toMatch(/unknown option `--timout`; did you mean `--timeout`\?/);
  });

  it("exits with the command's code; the command sees the key, token and owner; 127 when it cannot start; 69 when the store is down", async () => {
    const key = freshKey();
    const out = join(dir, `${keySeq}.env`);
    const ran = await cli(['run', key, '--', 'sh', '-c', `echo "$DEADBOLT_KEY $DEADBOLT_TOKEN $DEADBOLT_OWNER" > ${out}; exit 3`]);
    expect(ran.code).toBe(3);
    const [seenKey, token, owner] = readFileSync(out, 'utf8').trim().split(' ');
    expect(seenKey).toBe(key);
    expect(BigInt(token!)).toBeGreaterThan(0n);
    expect(owner).toMatch(/^[0-9a-f-]{36}$/);
    expect((await cli(['run', key, '-c', 'exit 7'])).code).toBe(7);
    const missing = await cli(['run', key, '--', join(dir, 'no-such-program')]);
    expect(missing.code).toBe(127);
    expectOneLine(missing);
    const down = await cli(['run', '-u', 'redis://127.0.0.1:1', key, '--', 'true']);
    expect(down.code).toBe(69);
    expectOneLine(down);
    // Nothing left held: the key is free for the next one at once.
    expect((await cli(['run', '-n', key, '--', 'true'])).code).toBe(0);
  });

  it('-n and -w on a held key: 75 (or -E), -w after its time; signals reach the command, which decides the code', async () => {
    const key = freshKey();
    const ready = join(dir, `${keySeq}.ready`);
    const log = join(dir, `${keySeq}.log`);
    const holder = deadbolt([
      'run',
      key,
      '--',
      'sh',
      '-c',
      `trap 'echo USR1 >> ${log}' USR1; trap 'echo TERM >> ${log}; exit 5' TERM; echo up > ${ready}; while true; do sleep 0.05; done`,
    ]);
    await fileSoon(ready);
    expect((await cli(['run', '-n', key, '--', 'true'])).code).toBe(75);
    expect((await cli(['run', '-n', '-E', '9', key, '--', 'true'])).code).toBe(9);
    const waited = await cli(['run', '-w', '0.5', key, '--', 'true']);
    expect(waited.code).toBe(75);
    expect(waited.ms).toBeGreaterThanOrEqual(500);
    expect(waited.stderr).toMatch(/still held after 0.5 s/);
    holder.child.kill('SIGUSR1');
    await new Promise((r) => setTimeout(r, 300));
    holder.child.kill('SIGTERM');
    expect((await holder.done).code).toBe(5);
    expect(readFileSync(log, 'utf8')).toBe('USR1\nTERM\n');
    // A command ended by a signal it does not catch: 128 + its number, as a shell reports it.
    const plain = deadbolt(['run', key, '--', 'sleep', '30']);
    await inspectUntil(REDIS, key, (s) => s.holders.length === 1);
    plain.child.kill('SIGTERM');
    expect((await plain.done).code).toBe(143);
    expect((await inspectUntil(REDIS, key, (s) => s.holders.length === 0)).holders).toEqual([]);
  });

  it('a lock lost while the command runs: SIGTERM, then SIGKILL after --grace; exit 76', async () => {
    const admin = new Redis(REDIS);
    try {
      const loseClaim = async (key: string) => {
        const names = await admin.keys(`deadbolt:{*}lock:${key}`);
        expect(names).toHaveLength(1);
        await admin.del(names[0]!);
      };
      const key = freshKey();
      const log = join(dir, `${keySeq}.log`);
      const polite = deadbolt([
        'run',
        '-t',
        '3',
        '-g',
        '5',
        key,
        '--',
        'sh',
        '-c',
        `trap 'echo TERM > ${log}; exit 0' TERM; echo up > ${log}.up; while true; do sleep 0.05; done`,
      ]);
      await fileSoon(`${log}.up`);
      await loseClaim(key);
      const ran = await polite.done;
      expect(ran.code).toBe(76);
      expect(readFileSync(log, 'utf8')).toBe('TERM\n');
      expect(ran.stderr).toMatch(/lost the lock on .*SIGTERM, SIGKILL in 5 s/);
      // One that ignores SIGTERM is killed after the grace.
      const stubborn = deadbolt([
        'run',
        '-t',
        '3',
        '-g',
        '1',
        key,
        '--',
        'sh',
        '-c',
        `trap '' TERM; echo up > ${log}.up2; while true; do sleep 0.05; done`,
      ]);
      await fileSoon(`${log}.up2`);
      await loseClaim(key);
      const lostAt = performance.now();
      expect((await stubborn.done).code).toBe(76);
      // Found within a renewal period (1 s at a 3 s ttl), killed 1 s after.
      expect(performance.now() - lostAt).toBeLessThan(5000);
    } finally {
      admin.disconnect();
    }
  });

  it("the command's whole process group: a grandchild that keeps writing is stopped on a loss and on SIGTERM, and the lock is held until it is gone", async () => {
    const admin = new Redis(REDIS);
    const alive = (pid: number) => {
      try {
        process.kill(pid, 0);
        return !readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.startsWith('Z');
      } catch {
        return false;
      }
    };
    /** A shell whose background child appends to `log` every 50 ms (ignoring SIGTERM when `stubborn`), its pid in `log.pid`. */
    const writer = (log: string, stubborn: boolean) =>
      `(${stubborn ? "trap '' TERM; " : "trap 'sleep 3; echo gone >> " + log + "; exit 0' TERM; "}while true; do echo tick >> ${log}; sleep 0.05; done) & echo $! > ${log}.pid; wait`;
    const grows = async (log: string) => {
      // The pid file is written as the writer starts, maybe before its first line: wait for that.
      const before = (await fileSoon(log)).length;
      await new Promise((r) => setTimeout(r, 300));
      return readFileSync(log, 'utf8').length > before;
    };
    try {
      // Lost: the group gets SIGTERM, the grandchild ignores it, SIGKILL after the grace ends it.
      const key = freshKey();
      const log = join(dir, `${keySeq}.group`);
      const lost = deadbolt(['run', '-t', '3', '-g', '1', key, '--', 'sh', '-c', writer(log, true)]);
      const pid = Number((await fileSoon(`${log}.pid`)).trim());
      expect(await grows(log)).toBe(true);
      const names = await admin.keys(`deadbolt:{*}lock:${key}`);
      await admin.del(names[0]!);
      const ran = await lost.done;
      expect(ran.code, ran.stderr).toBe(76);
      expect(alive(pid), 'the grandchild outlived the lost lock').toBe(false);
      expect(await grows(log), 'something still writes after deadbolt exited').toBe(false);

      // SIGTERM to deadbolt: passed to the group; the grandchild takes 3 s to go, and the lock
      // stays held until it has. Read in the store rather than by a second deadbolt: a process
      // that starts Node took longer than the grandchild's grace on a loaded machine.
      const key2 = freshKey();
      const log2 = join(dir, `${keySeq}.group2`);
      const term = deadbolt(['run', '-t', '3', key2, '--', 'sh', '-c', writer(log2, false)]);
      const pid2 = Number((await fileSoon(`${log2}.pid`)).trim());
      term.child.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 400));
      expect(alive(pid2)).toBe(true);
      expect(await admin.keys(`deadbolt:{*}lock:${key2}`), 'released while the grandchild still ran').toHaveLength(1);
      expect(alive(pid2), 'the grandchild was gone before the store was read').toBe(true);
      const ended = await term.done;
      expect(alive(pid2)).toBe(false);
      expect(readFileSync(log2, 'utf8')).toMatch(/gone\n$/);
      expect(ended.code, ended.stderr).toBe(143);
      expect((await cli(['run', '-n', key2, '--', 'true'])).code).toBe(0);

      // A command that leaves a child behind and exits: deadbolt holds the lock until the child ends.
      const key3 = freshKey();
      const log3 = join(dir, `${keySeq}.group3`);
      const t0 = performance.now();
      const left = await cli(['run', key3, '--', 'sh', '-c', `(sleep 1; echo late >> ${log3}) & exit 3`]);
      expect(left.code).toBe(3);
      expect(performance.now() - t0).toBeGreaterThan(900);
      expect(readFileSync(log3, 'utf8')).toBe('late\n');
    } finally {
      admin.disconnect();
    }
  });

  it('--version and -V print the package version; --verbose says how long the lock took and its token', async () => {
    const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
    for (const flag of ['--version', '-V']) expect(await cli([flag]), flag).toMatchObject({ code: 0, stdout: `deadbolt ${version}\n` });
    const key = freshKey();
    const out = join(dir, `${keySeq}.token`);
    const ran = await cli(['run', '--verbose', key, '--', 'sh', '-c', `echo "$DEADBOLT_TOKEN" > ${out}`]);
    expect(ran.code).toBe(0);
    expect(ran.stderr).toBe(
      `deadbolt: took ${key} in ${/in (\d+\.\d{3}) s/.exec(ran.stderr)?.[1]} s, fencing token ${readFileSync(out, 'utf8').trim()}\n`,
    );
  });

  it('a wait interrupted by SIGTERM ends at once (143) and leaves no place in the queue', async () => {
    const key = freshKey();
    const holder = deadbolt(['run', key, '--', 'sleep', '30']);
    await inspectUntil(REDIS, key, (s) => s.holders.length === 1);
    const waiter = deadbolt(['run', key, '--', 'true']);
    await inspectUntil(REDIS, key, (s) => s.waiters?.length === 1);
    waiter.child.kill('SIGTERM');
    const ran = await waiter.done;
    expect(ran.code).toBe(143);
    expectOneLine(ran);
    expect((await inspectUntil(REDIS, key, (s) => s.waiters?.length === 0)).waiters).toEqual([]);
    holder.child.kill('SIGTERM');
    await holder.done;
  });

  it('-x is the plain lock, as in flock; --read readers share, --write waits for them; -l N lets N in at once', async () => {
    const plain = freshKey();
    const x = deadbolt(['run', '-x', plain, '--', 'sleep', '30']);
    await inspectUntil(REDIS, plain, (s) => s.holders.length === 1);
    expect((await cli(['run', '-n', plain, '--', 'true'])).code).toBe(75);
    x.child.kill('SIGTERM');
    await x.done;
    const refused = await cli(['run', '-s', plain, '--', 'true']);
    expect(refused.code).toBe(64);
    expect(refused.stderr).toContain('use --read and --write');
    const key = freshKey();
    const a = deadbolt(['run', '--read', key, '--', 'sleep', '30']);
    await inspectUntil(REDIS, key, (s) => s.holders.length === 1, true);
    expect((await cli(['run', '--read', '-n', key, '--', 'true'])).code).toBe(0);
    expect((await cli(['run', '--write', '-n', key, '--', 'true'])).code).toBe(75);
    // The plain lock KEY is another namespace: free.
    expect((await cli(['run', '-n', key, '--', 'true'])).code).toBe(0);
    a.child.kill('SIGTERM');
    await a.done;
    const sem = freshKey();
    const permits = [deadbolt(['run', '-l', '2', sem, '--', 'sleep', '30']), deadbolt(['run', '-l', '2', sem, '--', 'sleep', '30'])];
    const full = await inspectUntil(REDIS, sem, (s) => s.holders.length === 2, true);
    expect(full.limit).toBe(2);
    expect((await cli(['run', '-l', '2', '-n', sem, '--', 'true'])).code).toBe(75);
    for (const p of permits) p.child.kill('SIGTERM');
    await Promise.all(permits.map((p) => p.done));
  });
});

describe('deadbolt elect, leader and observe', () => {
  it.each([
    ['redis', REDIS],
    ['zookeeper', matrixUrl('zookeeper')],
  ])(
    '%s: the command runs while this process leads, with its term and token; a second candidate waits, -n is 75; leader and observe show each term',
    async (_name, url) => {
      const name = freshKey();
      const observer = deadbolt(['observe', name, '-u', url, '--interval', '0.1', '--json']);
      await once(observer.child.stdout!, 'data'); // its first line: nobody leads yet
      const first = join(dir, `${keySeq}.first`);
      const go = join(dir, `${keySeq}.go`);
      const leading = deadbolt([
        'elect',
        name,
        '-u',
        url,
        '-v',
        'first',
        '--',
        'sh',
        '-c',
        `echo "$DEADBOLT_TERM $DEADBOLT_TOKEN" > ${first}; while [ ! -e ${go} ]; do sleep 0.05; done`,
      ]);
      const [term, token] = (await fileSoon(first)).trim().split(' ');
      expect(term).toBe('1');
      const shown = await cli(['leader', name, '-u', url, '--json']);
      expect(shown.code, shown.stderr).toBe(0);
      expect(JSON.parse(shown.stdout)).toMatchObject({ value: 'first', term: 1, token });
      expect((await cli(['leader', name, '-u', url])).stdout).toMatch(new RegExp(`^${name}: first \\(term 1, token ${token}, for `));
      const busy = await cli(['elect', name, '-u', url, '-n', '--', 'true']);
      expect(busy.code, busy.stderr).toBe(75);
      const second = join(dir, `${keySeq}.second`);
      const waiting = deadbolt(['elect', name, '-u', url, '-v', 'second', '--', 'sh', '-c', `echo "$DEADBOLT_TERM" > ${second}; exit 3`]);
      await new Promise((r) => setTimeout(r, 500));
      writeFileSync(go, '');
      expect((await leading.done).code).toBe(0);
      expect((await waiting.done).code, "the command's own code").toBe(3);
      expect(readFileSync(second, 'utf8')).toBe('2\n');
      expect(JSON.parse((await cli(['leader', name, '-u', url, '--json'])).stdout)).toBeNull();
      observer.child.kill('SIGINT');
      const watched = await observer.done;
      expect(watched.code, watched.stderr).toBe(130);
      const changes = watched.stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { leader: { value: string; term: number } | null; missedTerms: number });
      expect(changes[0]).toEqual({ leader: null, missedTerms: 0 });
      expect(changes.find((c) => c.leader?.term === 1)?.leader?.value).toBe('first');
      // Term 2 was short: seen, or counted as missed.
      const seenSecond = changes.some((c) => c.leader?.term === 2);
      expect(seenSecond || changes.some((c) => c.missedTerms === 1), watched.stdout).toBe(true);
      expect(changes.at(-1)!.leader).toBeNull();
    },
    60_000,
  );

  it('--again: a lost term stops the command (SIGTERM) and the process campaigns again, the next term with a higher token', async () => {
    const admin = new Redis(REDIS);
    try {
      const name = freshKey();
      const log = join(dir, `${keySeq}.terms`);
      const leading = deadbolt([
        'elect',
        name,
        '-u',
        REDIS,
        '-t',
        '3',
        '-g',
        '1',
        '--again',
        '--',
        'sh',
        '-c',
        `echo "$DEADBOLT_TERM $DEADBOLT_TOKEN" >> ${log}; trap 'echo TERM >> ${log}; exit 0' TERM; while true; do sleep 0.05; done`,
      ]);
      await fileSoon(log);
      const [claim] = await admin.keys(`deadbolt:{*}lock:${name}`);
      expect(claim, 'the term is a lock of the election name').toBeDefined();
      await admin.del(claim!);
      const deadline = performance.now() + 20_000;
      while (readFileSync(log, 'utf8').trim().split('\n').length < 3 && performance.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
      leading.child.kill('SIGTERM');
      const ran = await leading.done;
      const [first, stopped, second] = readFileSync(log, 'utf8').trim().split('\n');
      expect(stopped, ran.stderr).toBe('TERM');
      const [term1, token1] = first!.split(' ');
      const [term2, token2] = second!.split(' ');
      expect(term1).toBe('1');
      expect(term2).toBe('2');
      expect(BigInt(token2!)).toBeGreaterThan(BigInt(token1!));
      expect(ran.stderr).toMatch(/campaigning again/);
      expect(ran.code).not.toBe(76);
    } finally {
      admin.disconnect();
    }
  }, 60_000);

  it('bad usage is 64 before any store is contacted; redlock has no fence', async () => {
    for (const args of [
      ['elect'],
      ['elect', 'n'],
      ['elect', 'n', 'extra', '--', 'true'],
      ['leader'],
      ['observe', 'n', '--interval', '0'],
    ]) {
      const ran = await cli(args, { DEADBOLT_URL: 'redis://127.0.0.1:1' });
      expect(ran.code, `${args.join(' ')}: ${ran.stderr}`).toBe(64);
      expectOneLine(ran);
    }
    const redlock = await cli(['leader', 'n', '-u', 'redlock://127.0.0.1:6379,127.0.0.1:6380,127.0.0.1:6381']);
    expect(redlock.code).toBe(64);
    expect(redlock.stderr).toMatch(/no fence/);
  });
});

describe('deadbolt inspect on every store', () => {
  const stores: [string, string][] = (['redis', 'mysql', 'postgres', 'zookeeper', 'etcd', 'cassandra'] as MatrixServer[]).map((s) => [
    s,
    matrixUrl(s),
  ]);
  stores.push(['postgres session mode', `${matrixUrl('postgres')}?mode=session`]);

  it.each(stores)(
    '%s: free, held (owner and token as the command sees them), contended, free again',
    async (_name, url) => {
      const key = freshKey();
      expect((await inspectText(url, key)).split('\n')[0]).toBe(`${key}: free`);
      const env = join(dir, `${keySeq}.env`);
      const holder = deadbolt(['run', '-u', url, key, '--', 'sh', '-c', `echo "$DEADBOLT_OWNER $DEADBOLT_TOKEN" > ${env}; exec sleep 30`]);
      const [owner, token] = (await fileSoon(env)).trim().split(' ');
      const held = await inspectUntil(url, key, (s) => s.holders.length === 1);
      expect(held.holders).toEqual([expect.objectContaining({ owner, token })]);
      const waiter = deadbolt(['run', '-u', url, '-w', '60', key, '--', 'true']);
      const contended = await inspectUntil(url, key, (s) => s.waiters === null || s.waiters.length === 1);
      expect(contended.holders).toEqual([expect.objectContaining({ owner, token })]);
      if (contended.waiters !== null) expect(contended.waiters).toHaveLength(1);
      const text = await inspectText(url, key);
      // A holder that lost its lease says so on stderr (and its command is stopped).
      expect(text, `the holder's stderr: ${holder.stderr()}`).toContain(`${key}: held by 1`);
      expect(text).toContain(`holder  ${owner}  token ${token}`);
      holder.child.kill('SIGTERM');
      expect((await holder.done).code).toBe(143);
      expect((await waiter.done).code).toBe(0);
      expect((await inspectUntil(url, key, (s) => s.holders.length === 0)).holders).toEqual([]);
    },
    90_000,
  );

  it('a store that takes the connection and never answers: 69 after --timeout, one line naming the wait', async () => {
    // A listener that accepts and stays silent, as a hung server or a black-holed route would.
    const silent = createServer(() => undefined);
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = silent.address() as AddressInfo;
      const ran = await cli(['inspect', freshKey(), '-u', `redis://127.0.0.1:${port}`, '--timeout', '0.5']);
      expect(ran.code, ran.stderr).toBe(69);
      expectOneLine(ran);
      // The message proves the 500 ms deadline was the one applied (the default is 10 s); the bound
      // only proves the process then exits rather than lingering on an open connection. Generous: a
      // loaded CI machine once took 10.2 s to start the command, time out and exit.
      expect(ran.stderr).toMatch(/no answer within 500 ms/);
      expect(ran.ms).toBeLessThan(30_000);
    } finally {
      silent.close();
    }
  });
});

describe('deadbolt bench', () => {
  it('times each store given, one after another: both workloads measured, never two holders at once', async () => {
    const urls = [REDIS, matrixUrl('postgres')];
    const ran = await cli(['bench', ...urls, '--seconds', '0.5', '--clients', '3', '--json']);
    expect(ran.code, ran.stderr).toBe(0);
    const rows = JSON.parse(ran.stdout) as {
      store: string;
      uncontended: { cycles: number; perSecond: number; p50: number };
      contended: { clients: number; holds: number; perSecond: number; waitP99: number; mostAtOnce: number };
    }[];
    // Shown without credentials.
    expect(rows.map((r) => r.store)).toEqual([REDIS, matrixUrl('postgres').replace(/\/\/[^@/]*@/, '//')]);
    for (const row of rows) {
      expect(row.uncontended.cycles).toBeGreaterThan(0);
      expect(row.uncontended.p50).toBeGreaterThan(0);
      expect(row.contended).toMatchObject({ clients: 3, mostAtOnce: 1 });
      expect(row.contended.holds).toBeGreaterThan(3);
    }
    // Progress on stderr, a table on stdout without --json.
    expect(ran.stderr).toMatch(/redis:\/\/127\.0\.0\.1:\d+: 3 clients on one key/);
    const table = await cli(['bench', REDIS, '--seconds', '0.2', '--clients', '2']);
    expect(table.stdout.split('\n')[0]).toMatch(/^\| store \| one client: cycles\/s .* 2 clients, 1 ms holds: holds\/s/);
  }, 60_000);

  it('bad flags are 64 and a store that cannot be reached 69, one line each', async () => {
    for (const args of [
      ['bench', REDIS, '--clients', '0'],
      ['bench', REDIS, '--seconds', 'soon'],
      ['bench', REDIS, '--seconds', '0'],
      ['bench', REDIS, 'gopher://x'],
    ]) {
      const ran = await cli(args);
      expect(ran.code, args.join(' ')).toBe(64);
      expectOneLine(ran);
    }
    const down = await cli(['bench', 'redis://127.0.0.1:1', '--seconds', '0.2']);
    expect(down.code).toBe(69);
    expect(
      down.stderr
        .trim()
        .split('\n')
        .filter((l) => l.startsWith('deadbolt: ')),
    ).toHaveLength(1);
  });
});

describe('deadbolt release --force', () => {
  it("frees a stuck holder's lock after confirmation (its command is stopped, exit 76); never without --force and --yes; a stranger's owner frees nothing", async () => {
    const key = freshKey();
    const up = join(dir, `${keySeq}.up`);
    const holder = deadbolt(['run', '-t', '3', '-g', '2', key, '--', 'sh', '-c', `echo up > ${up}; exec sleep 60`]);
    await fileSoon(up);
    const seen = await inspectUntil(REDIS, key, (s) => s.holders.length === 1);
    const owner = seen.holders[0]!.owner;
    for (const args of [
      ['release', key],
      ['release', '--force'],
      ['release', key, '--force'],
    ]) {
      const ran = await cli(args);
      expect(ran.code, args.join(' ')).toBe(64);
      expectOneLine(ran);
    }
    // Not confirmed (no terminal here, no --yes): still held.
    expect((await cli(['release', key, '--force'])).stderr).toMatch(/not freed: confirm with --yes/);
    const stranger = await cli(['release', key, '--force', '--yes', '--owner', '00000000-0000-4000-8000-000000000000']);
    expect(stranger.code).toBe(1);
    expect(stranger.stdout).toMatch(/holds nothing to free/);
    expect((await inspectUntil(REDIS, key, (s) => s.holders.length === 1)).holders[0]!.owner).toBe(owner);
    const freed = await cli(['release', key, '--force', '--yes']);
    expect(freed.code, freed.stderr).toBe(0);
    expect(freed.stdout).toBe(`${key}: freed ${owner} (token ${seen.holders[0]!.token})\n`);
    // The holder learns at its next renewal, stops its command, and says why.
    const ran = await holder.done;
    expect(ran.code).toBe(76);
    expect(ran.stderr).toMatch(/lost the lock/);
    expect((await cli(['release', key, '--force', '--yes'])).code).toBe(1);
  }, 60_000);

  it('a permit of a semaphore with -s; a store whose locks are server sessions refuses, typed (64), and frees nothing', async () => {
    const key = freshKey();
    const up = join(dir, `${keySeq}.up`);
    const permit = deadbolt(['run', '-l', '2', '-t', '3', key, '--', 'sh', '-c', `echo up > ${up}; exec sleep 60`]);
    await fileSoon(up);
    await inspectUntil(REDIS, key, (s) => s.holders.length === 1, true);
    expect((await cli(['release', key, '-s', '--force', '--yes'])).code).toBe(0);
    expect((await permit.done).code).toBe(76);

    const session = `${matrixUrl('postgres')}?mode=session`;
    const held = deadbolt(['run', '-u', session, key, '--', 'sh', '-c', `echo up > ${up}.pg; exec sleep 60`]);
    await fileSoon(`${up}.pg`);
    const refused = await cli(['release', key, '-u', session, '--force', '--yes']);
    expect(refused.code).toBe(64);
    expect(refused.stderr).toMatch(/^deadbolt: the postgres backend cannot free another client's lock/);
    expect((await inspectUntil(session, key, (s) => s.holders.length === 1)).holders).toHaveLength(1);
    held.child.kill('SIGTERM');
    expect((await held.done).code).toBe(143);
  }, 60_000);
});
