import { createLocker, type Lock } from '@deadbolt/core';
import { closeLockersAfterEach, defineConformanceSuite, FaultProxy, retryFor, storeAddress, viaUrl } from '@deadbolt/conformance';
import { redlockBackend } from '@deadbolt/redis';
import { keysFor } from '@deadbolt/redis/testing';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { beforeAll, describe, expect, it } from 'vitest';
import { redlockNodes, redlockSuiteOptions } from './harness.js';

const MAX_TTL_MS = 5000;
const matrix = new URL('../../../test-matrix/', import.meta.url).pathname;

/** Nodes that test-matrix started a moment ago guard themselves for `maxTtlMs`: wait that out once. */
async function guardsPassed(nodes: string[]): Promise<void> {
  const locker = createLocker(redlockBackend({ nodes, maxTtlMs: MAX_TTL_MS }), { ttlMs: 1000 });
  try {
    await (await locker.lock(`redlock-warm-up/${Math.random()}`, { timeoutMs: 3 * MAX_TTL_MS })).release();
  } finally {
    await locker.close();
  }
}

beforeAll(() => guardsPassed(redlockNodes(5)), 60_000);

defineConformanceSuite(redlockSuiteOptions(MAX_TTL_MS));

describe('redlock over 5 nodes', () => {
  const track = closeLockersAfterEach();
  const nodes = redlockNodes(5);
  // A node this file shuts down makes its admin client retry; that is expected, not worth a log line.
  const admins = nodes.map((url) => new Redis(url).on('error', () => undefined));
  const newLocker = (ttlMs = 1000) => track(createLocker(redlockBackend({ nodes, maxTtlMs: MAX_TTL_MS }), { ttlMs }));

  /** Four clients take one key in turn for `ms`, while `fault` runs; every hold is checked against every other. */
  async function contendDuring(ms: number, fault: () => Promise<void>) {
    const key = `redlock-test/${Math.random().toString(36).slice(2)}`;
    const holds: { start: number; end: number; token: bigint }[] = [];
    const until = performance.now() + ms;
    const worker = async () => {
      const locker = newLocker();
      while (performance.now() < until) {
        let lock: Lock;
        try {
          lock = await locker.lock(key, { timeoutMs: 5000 });
        } catch (error) {
          // A node going away mid-call can fail one call with a typed error; never a wrong lock.
          expect(error).toMatchObject({ code: expect.stringMatching(/^(BACKEND_UNAVAILABLE|LOCK_TIMEOUT)$/) });
          continue;
        }
        const start = performance.now();
        await new Promise((r) => setTimeout(r, 2));
        const end = performance.now();
        const stillHeld = lock.held;
        await lock.release().catch(() => undefined);
        if (stillHeld) holds.push({ start, end, token: lock.token });
      }
    };
    await Promise.all([worker(), worker(), worker(), worker(), fault()]);
    holds.sort((a, b) => a.start - b.start);
    for (let i = 1; i < holds.length; i++) {
      expect(holds[i]!.start, 'two holders at once').toBeGreaterThanOrEqual(holds[i - 1]!.end);
      expect(holds[i]!.token, 'tokens out of order').toBeGreaterThan(holds[i - 1]!.token);
    }
    return holds;
  }

  it('one node killed mid-run: no two holders, tokens strictly rising, the rest carry on', async () => {
    const holds = await contendDuring(3000, async () => {
      await new Promise((r) => setTimeout(r, 1000));
      // kill -9: a SHUTDOWN's reply never comes, and ioredis would retry it for seconds.
      process.kill(Number(/process_id:(\d+)/.exec(await admins[4]!.info('server'))![1]), 'SIGKILL');
    });
    expect(holds.length).toBeGreaterThan(20);
    await promisify(execFile)('bash', [`${matrix}up`, 'redis-redlock']);
    await retryFor(10_000, () => admins[4]!.ping());
  }, 60_000);

  it('one node restarted empty mid-run: its guard keeps it out; no two holders, tokens strictly rising', async () => {
    const holds = await contendDuring(3000, async () => {
      await new Promise((r) => setTimeout(r, 1000));
      await promisify(execFile)('bash', [`${matrix}restart`, 'redis-redlock']); // node 1 of 5, empty
      expect(await admins[0]!.dbsize()).toBeLessThanOrEqual(2); // its birth mark and guard at most
    });
    expect(holds.length).toBeGreaterThan(20);
  }, 60_000);

  it('tokens agree on every node that granted (no lift), and a node whose counter stands ahead is lifted past', async () => {
    const backend = redlockBackend({ nodes, maxTtlMs: MAX_TTL_MS });
    const locker = track(createLocker(backend, { ttlMs: 1000 }));
    const key = `redlock-test/${Math.random()}`;
    const { token: counter } = keysFor(backend, key);
    const counters = async () => (await Promise.all(admins.map((a) => a.get(counter)))).map((v) => BigInt(v ?? '0'));
    const first = await locker.lock(key);
    await first.release();
    // Every node that granted (a node the tests above restarted empty may still be in its guard,
    // granting nothing) granted the proposed token: a majority at least, all at the lock's token.
    const granted = (await counters()).filter((c) => c !== 0n);
    expect(granted.length).toBeGreaterThanOrEqual(3);
    expect(granted).toEqual(granted.map(() => first.token));
    // Three nodes' counters a minute ahead, each by a little more (a contender's leftovers, clocks
    // ahead of ours): every majority has one of them, granting above the proposal and unlike any
    // other, so the lock's token is the highest granted and the rest of a majority is lifted to it.
    const ahead = first.token + 60_000_000n;
    await Promise.all([1, 2, 3].map((i) => admins[i]!.set(counter, (ahead + BigInt(10 * i)).toString(), 'PX', 60_000)));
    const second = await locker.lock(key);
    expect(second.token).toBeGreaterThan(ahead);
    expect((await counters()).filter((c) => c >= second.token).length).toBeGreaterThanOrEqual(3);
    await second.release();
    const third = await locker.lock(key);
    expect(third.token).toBeGreaterThan(second.token);
    await third.release();
  });

  it('a release settles once a majority released; a slow node still gets its release, and close() waits for it', async () => {
    // Nodes 2 to 4 (the tests above restart node 1 and kill node 5, which then refuse to grant
    // for a while), the third of them through a proxy.
    const proxy = await FaultProxy.start(storeAddress(nodes[3]!));
    try {
      const backend = redlockBackend({ nodes: [nodes[1]!, nodes[2]!, viaUrl(nodes[3]!, proxy.address)], maxTtlMs: MAX_TTL_MS });
      const locker = createLocker(backend, { ttlMs: MAX_TTL_MS });
      const key = `redlock-test/${Math.random()}`;
      const name = keysFor(backend, key).lock;
      const values = () => Promise.all([1, 2, 3].map((i) => admins[i]!.get(name)));
      const lock = await locker.lock(key);
      // The lock was reported once a majority granted: wait for the third node's grant too.
      await retryFor(2000, async () => expect(await values()).toEqual([lock.owner, lock.owner, lock.owner]));
      proxy.delay(1000); // the third node now answers a second late (each way)
      const started = performance.now();
      await lock.release();
      // It used to wait for the slowest node: every release was as slow as that node.
      expect(performance.now() - started, 'the release waited for the slow node').toBeLessThan(500);
      expect(await values(), 'the slow node was released before its request could arrive').toEqual([null, null, lock.owner]);
      // close() lets the slow node's release land before it closes the connections.
      await locker.close();
      expect(await values(), 'close() cut the slow node off before its release landed').toEqual([null, null, null]);
    } finally {
      await proxy.close();
    }
  });

  it('a lock held across a node restart keeps a majority; a minority of nodes up is BackendUnavailableError', async () => {
    const locker = newLocker(2000);
    const lock = await locker.lock(`redlock-test/${Math.random()}`);
    expect(lock.held).toBe(true);
    const down = createLocker(redlockBackend({ nodes: [nodes[0]!, 'redis://127.0.0.1:1', 'redis://127.0.0.1:2'], maxTtlMs: MAX_TTL_MS }), {
      ttlMs: 1000,
    });
    track(down);
    await expect(down.tryLock('redlock-test/down')).rejects.toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
    await lock.release();
  });

  it('rejects bad options before any I/O', () => {
    // One server named twice would be a majority of three on its own.
    const twice = [nodes[0]!, nodes[0]!.replace('127.0.0.1', '127.0.0.1'), nodes[1]!];
    for (const bad of [
      { nodes: [] },
      { nodes: 'redis://x' },
      { nodes: nodes, maxTtlMs: 0 },
      { nodes: nodes, driftFactor: 0.5 },
      { nodes: nodes, retryDelayMs: 0 },
      { nodes: twice },
      { nodes: [nodes[0]!, `${nodes[0]!}/3`, nodes[1]!] },
    ]) {
      expect(() => redlockBackend(bad as never), JSON.stringify(bad)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    }
  });
});
