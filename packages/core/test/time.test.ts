import { spawnSync } from 'node:child_process';
import { connect } from 'node:net';
import { Worker } from 'node:worker_threads';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { after, timerLists, withTimeout } from '../src/kit/time.js';
import { createLocker, memoryBackend, MemoryLockStore } from '../src/index.js';

describe('after(): timers that share one Node timer per delay', () => {
  it('never fires early, fires each timer once, in deadline order (deadlines a few ms apart; within a millisecond the order is not promised), and a cancelled one never', async () => {
    const fired: [string, number][] = [];
    const started = performance.now();
    const arm = (name: string, ms: number) => after(ms, () => fired.push([name, performance.now() - started]));
    arm('a', 30);
    const b = arm('b', 30);
    arm('c', 36.4);
    arm('d', 5);
    arm('e', 0);
    b.cancel();
    b.cancel();
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(fired.map(([name]) => name)).toEqual(['e', 'd', 'a', 'c']);
    const at = Object.fromEntries(fired);
    expect(at.d).toBeGreaterThanOrEqual(5);
    expect(at.a).toBeGreaterThanOrEqual(30);
    expect(at.c).toBeGreaterThanOrEqual(36.4);
  });

  it('a timer armed from a firing callback of the same delay waits its own full delay; an earlier one is not delayed by it', async () => {
    // [armed, fired] per timer, ms on the monotonic clock.
    const spans: Record<string, [number, number]> = {};
    const arm = (name: string, then?: () => void) => {
      const armed = performance.now();
      after(20, () => {
        spans[name] = [armed, performance.now()];
        then?.();
      });
    };
    arm('first', () => arm('inner'));
    setTimeout(() => arm('later'), 5);
    await new Promise((resolve) => setTimeout(resolve, 300));
    for (const name of ['first', 'inner', 'later']) {
      const [armed, fired] = spans[name]!;
      expect(fired - armed, name).toBeGreaterThanOrEqual(20);
    }
    // 'later' (armed ~5 ms after 'first', due ~15 ms before 'inner') is not held back to 'inner's time.
    expect(spans.later![1]).toBeLessThan(spans.inner![1]);
  });

  it('a callback that throws does not stop the others of its list (the error is uncaught, as from a Node timer)', async () => {
    const errors: unknown[] = [];
    const onError = (error: unknown) => errors.push(error);
    process.prependListener('uncaughtException', onError);
    try {
      const ran: string[] = [];
      after(10, () => {
        throw new Error('boom');
      });
      after(10, () => ran.push('second'));
      await new Promise((resolve) => setTimeout(resolve, 40));
      expect(ran).toEqual(['second']);
      expect(errors).toHaveLength(1);
    } finally {
      process.removeListener('uncaughtException', onError);
    }
  });

  it('a cancelled timer does not hold the process open; an armed one does, until it fires', () => {
    const time = fileURLToPath(new URL('../dist/kit/time.js', import.meta.url));
    const run = (body: string) => {
      const started = performance.now();
      const child = spawnSync(process.execPath, ['--input-type=module', '-e', `import { after } from ${JSON.stringify(time)};\n${body}`], {
        encoding: 'utf8',
      });
      return { ms: performance.now() - started, out: child.stdout.trim(), status: child.status };
    };
    // The timers that must not hold the process are a minute long, so the bound that tells them
    // apart (half a minute) leaves room for a slow process start: on a loaded CI machine a node
    // process that did nothing took over 3 s to start and exit.
    const cancelled = run(`after(60_000, () => console.log('fired')).cancel();`);
    expect(cancelled).toMatchObject({ status: 0, out: '' });
    expect(cancelled.ms).toBeLessThan(30_000);
    const armed = run(`const t = after(5000, () => {}); t.cancel(); after(5000, () => console.log('fired'));`);
    expect(armed).toMatchObject({ status: 0, out: 'fired' });
    expect(armed.ms).toBeGreaterThanOrEqual(5000);
    const unref = run(`after(60_000, () => console.log('fired'), true);`);
    expect(unref).toMatchObject({ status: 0, out: '' });
    expect(unref.ms).toBeLessThan(30_000);
  });

  it('cancelled timers of ever new delays do not pile up: 100 000 waits with distinct timeouts leave a bounded number of timer lists, and no memory', async () => {
    // Measured in a process of its own, after a full GC: Node also keeps state for every delay it was given.
    const time = new URL('../dist/kit/time.js', import.meta.url).href;
    const body = `const heap = () => (globalThis.gc(), process.memoryUsage().heapUsed);
      const start = heap();
      for (let i = 0; i < 100000; i++) after(10000 + i * 7.3, () => undefined).cancel();
      await new Promise((r) => setTimeout(r, 50));
      console.log(Math.round((heap() - start) / 1e6));`;
    const child = spawnSync(
      process.execPath,
      ['--expose-gc', '--input-type=module', '-e', `import { after } from ${JSON.stringify(time)};\n${body}`],
      { encoding: 'utf8' },
    );
    expect(child.status, child.stderr).toBe(0);
    expect(Number(child.stdout.trim()), 'MB retained after 100 000 cancelled timers of distinct delays').toBeLessThanOrEqual(3);
    const before = timerLists();
    for (let i = 0; i < 100_000; i++) after(10_000 + i * 7.3, () => undefined).cancel();
    expect(timerLists() - before).toBeLessThanOrEqual(64);
    // The same through the API: waits that time out with distinct budgets (what lockAll gives each key).
    const locker = createLocker(memoryBackend({ store: new MemoryLockStore() }), { ttlMs: 60_000 });
    const held = await locker.lock('busy');
    await Promise.all(Array.from({ length: 2000 }, (_, i) => locker.lock('busy', { timeoutMs: 30 + i * 0.37 }).catch(() => undefined)));
    await held.release();
    await locker.close();
    expect(timerLists() - before).toBeLessThanOrEqual(64);
  });
});

describe('withTimeout(): "no answer" means none arrived', () => {
  it('an answer that reached the socket while this process was busy wins over the timer that ran late', async () => {
    // An echo server on a thread of its own answers while the main thread is blocked, as a store
    // does while a loaded machine gives this process no CPU.
    const worker = new Worker(
      `const { createServer } = require('node:net');
       const { parentPort } = require('node:worker_threads');
       const server = createServer((s) => s.on('data', (d) => s.write(d)));
       server.listen(0, '127.0.0.1', () => parentPort.postMessage(server.address().port));`,
      { eval: true },
    );
    try {
      const port = await new Promise<number>((resolve) => worker.once('message', resolve));
      const socket = connect(port, '127.0.0.1');
      await new Promise((resolve) => socket.once('connect', resolve));
      const answer = new Promise<string>((resolve) => socket.once('data', (d) => resolve(String(d))));
      socket.write('ping');
      const raced = withTimeout(answer, 50, () => new Error('no answer within 50 ms'));
      const until = performance.now() + 300;
      while (performance.now() < until); // busy past the timeout; the echo arrives meanwhile
      await expect(raced).resolves.toBe('ping');
      socket.destroy();
    } finally {
      await worker.terminate();
    }
  });

  it('still fails a promise that never settles, soon after the timeout', async () => {
    const started = performance.now();
    await expect(withTimeout(new Promise(() => undefined), 50, () => new Error('silent'))).rejects.toThrow('silent');
    expect(performance.now() - started).toBeLessThan(1000);
  });
});
