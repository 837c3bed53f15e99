// @deadbolt/otel against the real OpenTelemetry SDK (its in-memory span exporter and a metric
// reader collected on demand), on the memory backend: the spans of each call, ended once with
// the right status, and the metrics a dashboard needs. About a second.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { BackendUnavailableError, createLocker, memoryBackend, MemoryLockStore } from '@deadbolt/core';
import { wrapBackend } from '@deadbolt/core/testing';
import { metrics, SpanStatusCode, trace } from '@opentelemetry/api';
import { MeterProvider, MetricReader, type DataPoint, type Histogram } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterEach, describe, expect, it } from 'vitest';
import { instrumentDeadbolt, type DeadboltInstrumentation } from '../src/index.js';

/** A reader that exports nothing by itself: the test collects when it wants to look. */
class OnDemandReader extends MetricReader {
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}

let active: DeadboltInstrumentation | undefined;
afterEach(() => active?.disable());

function setUp(options: { keysOnSpans?: boolean } = {}) {
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const reader = new OnDemandReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  active = instrumentDeadbolt({ tracerProvider, meterProvider, ...options });
  /** Every data point of metric `name`. */
  const points = async (name: string): Promise<DataPoint<unknown>[]> => {
    const { resourceMetrics } = await reader.collect();
    return resourceMetrics.scopeMetrics.flatMap((s) =>
      s.metrics.filter((m) => m.descriptor.name === name).flatMap((m) => m.dataPoints as DataPoint<unknown>[]),
    );
  };
  return { exporter, points };
}

describe('@deadbolt/otel', () => {
  it('refuses options it does not know, naming the one probably meant, and options of the wrong type', () => {
    expect(() => instrumentDeadbolt({ keysOnSpan: false } as never)).toThrow(/unknown option `keysOnSpan`; did you mean `keysOnSpans`\?/);
    expect(() => instrumentDeadbolt({ keysOnSpans: 'no' } as never)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
  });

  it('a span per acquisition, release and extend, each ended once, with the lock attributes', async () => {
    const { exporter, points } = setUp();
    const locker = createLocker(memoryBackend({ store: new MemoryLockStore() }), { ttlMs: 5000 });
    const lock = await locker.lock('orders/7', { timeoutMs: 1000 });
    await lock.extend(6000);
    await lock.release();
    await lock.release(); // the same release: no second span
    const spans = exporter.getFinishedSpans();
    expect(spans.map((s) => s.name)).toEqual(['deadbolt.acquire', 'deadbolt.extend', 'deadbolt.release']);
    expect(spans[0]!.attributes).toMatchObject({
      'deadbolt.backend': 'memory',
      'deadbolt.family': 'mutex',
      'deadbolt.key': 'orders/7',
      'deadbolt.ttl_ms': 5000,
      'deadbolt.timeout_ms': 1000,
      'deadbolt.outcome': 'granted',
      'deadbolt.token': String(lock.token),
      'deadbolt.attempts': 1,
    });
    expect(spans[1]!.attributes).toMatchObject({ 'deadbolt.ttl_ms': 6000, 'deadbolt.token': String(lock.token) });
    expect(spans.every((s) => s.status.code !== SpanStatusCode.ERROR)).toBe(true);
    const held = await points('deadbolt.lock.held');
    expect(held.map((p) => p.value)).toEqual([0]); // +1 at the grant, −1 at the release
    const holds = (await points('deadbolt.lock.hold.duration')) as DataPoint<Histogram>[];
    expect(holds.map((p) => [p.attributes['deadbolt.ended'], p.value.count])).toEqual([['released', 1]]);
    await locker.close();
  });

  it("spans name the store's first server (server.address, server.port) and, when there are several, all of them", async () => {
    const { exporter } = setUp();
    for (const address of ['db1:5432,db2:5432', '[::1]:6379']) {
      const locker = createLocker(wrapBackend(memoryBackend({ store: new MemoryLockStore() }), { address }));
      await (await locker.lock('k')).release();
      await locker.close();
    }
    const [clustered, , single] = exporter.getFinishedSpans();
    expect(clustered!.attributes).toMatchObject({ 'server.address': 'db1', 'server.port': 5432, 'deadbolt.servers': 'db1:5432,db2:5432' });
    expect(single!.attributes).toMatchObject({ 'server.address': '::1', 'server.port': 6379 });
    expect(single!.attributes).not.toHaveProperty('deadbolt.servers');
  });

  it('a timed-out wait: an ERROR span with the error, one wait recorded by its outcome; a busy tryLock is not an error', async () => {
    const { exporter, points } = setUp({ keysOnSpans: false });
    const store = new MemoryLockStore();
    const holder = createLocker(memoryBackend({ store }));
    const other = createLocker(memoryBackend({ store }));
    const held = await holder.lock('k');
    expect(await other.tryLock('k')).toBeNull();
    await expect(other.lock('k', { timeoutMs: 50 })).rejects.toMatchObject({ code: 'LOCK_TIMEOUT' });
    const [, busy, timedOut] = exporter.getFinishedSpans();
    expect(busy!.attributes['deadbolt.outcome']).toBe('busy');
    expect(busy!.status.code).not.toBe(SpanStatusCode.ERROR);
    expect(timedOut!.status.code).toBe(SpanStatusCode.ERROR);
    expect(timedOut!.events.map((e) => e.name)).toEqual(['exception']);
    expect(timedOut!.attributes['deadbolt.key']).toBeUndefined();
    expect(exporter.getFinishedSpans()).toHaveLength(3);
    const waits = (await points('deadbolt.lock.wait.duration')) as DataPoint<Histogram>[];
    const byOutcome = Object.fromEntries(waits.map((p) => [p.attributes['deadbolt.outcome'], p.value.count]));
    expect(byOutcome).toEqual({ granted: 1, busy: 1, LOCK_TIMEOUT: 1 });
    expect(waits.find((p) => p.attributes['deadbolt.outcome'] === 'LOCK_TIMEOUT')!.value.sum).toBeGreaterThanOrEqual(0.045);
    expect((await points('deadbolt.lock.waiting')).map((p) => p.value)).toEqual([0]);
    await held.release();
    await Promise.all([holder.close(), other.close()]);
  });

  it('a lost lease: counted as lost, off the held gauge once (also when released afterwards), renewal failures counted', async () => {
    const { points } = setUp();
    // The memory backend, its renewals failing on demand as an unreachable store's would.
    const backend = memoryBackend({ store: new MemoryLockStore() });
    const renew = backend.renew.bind(backend);
    let down = false;
    backend.renew = async (lease, ttl) => {
      if (down) throw new BackendUnavailableError('memory', 'renew', { cause: new Error('connection refused') });
      return renew(lease, ttl);
    };
    const locker = createLocker(backend, { ttlMs: 300 });
    const lock = await locker.lock('r');
    down = true;
    await new Promise<void>((resolve) => lock.signal.addEventListener('abort', () => resolve(), { once: true }));
    down = false;
    await lock.release();
    expect((await points('deadbolt.lock.lost')).map((p) => p.value)).toEqual([1]);
    expect((await points('deadbolt.lock.held')).map((p) => p.value)).toEqual([0]);
    const failures = await points('deadbolt.lock.renewal.failures');
    expect(failures[0]!.value).toBeGreaterThan(0);
    const holds = (await points('deadbolt.lock.hold.duration')) as DataPoint<Histogram>[];
    expect(holds.map((p) => [p.attributes['deadbolt.ended'], p.value.count])).toEqual([['lost', 1]]);
    await locker.close();
  });

  it('disable() stops recording', async () => {
    const { exporter } = setUp();
    active!.disable();
    const locker = createLocker(memoryBackend({ store: new MemoryLockStore() }));
    await (await locker.lock('off')).release();
    expect(exporter.getFinishedSpans()).toEqual([]);
    await locker.close();
  });

  it("the README's setup: instrumentDeadbolt() records into the global providers", async () => {
    const exporter = new InMemorySpanExporter();
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
    const reader = new OnDemandReader();
    metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
    try {
      active = instrumentDeadbolt();
      const locker = createLocker(memoryBackend({ store: new MemoryLockStore() }));
      await (await locker.lock('global')).release();
      await locker.close();
      expect(exporter.getFinishedSpans().map((s) => s.name)).toEqual(['deadbolt.acquire', 'deadbolt.release']);
      const { resourceMetrics } = await reader.collect();
      expect(resourceMetrics.scopeMetrics.flatMap((s) => s.metrics.map((m) => m.descriptor.name))).toContain('deadbolt.lock.wait.duration');
    } finally {
      trace.disable();
      metrics.disable();
    }
  });
});

describe("the README's setup", () => {
  it('runs as written in plain JavaScript: a lock and its release are printed as spans and metrics', async () => {
    const readme = readFileSync(fileURLToPath(new URL('../README.md', import.meta.url)), 'utf8');
    const block = /## A complete setup[\s\S]*?```js\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(block, 'the README has the setup block').toBeDefined();
    // Beside package.json, so that its imports resolve as an application's would.
    const file = fileURLToPath(new URL(`../readme-setup-${process.pid}.mjs`, import.meta.url));
    writeFileSync(
      file,
      `${block}\nimport { createLocker, memoryBackend } from '@deadbolt/core';\n` +
        `const locker = createLocker(memoryBackend());\nawait (await locker.lock('readme')).release();\nawait locker.close();\n` +
        `await tracerProvider.shutdown();\nawait meterProvider.shutdown();\n`,
    );
    try {
      const child = spawn(process.execPath, [file], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const [code] = await once(child, 'exit');
      expect(code, out).toBe(0);
      for (const name of ['deadbolt.acquire', 'deadbolt.release', 'deadbolt.lock.wait.duration', 'deadbolt.lock.hold.duration'])
        expect(out).toContain(`name: '${name}'`);
    } finally {
      rmSync(file, { force: true });
    }
  }, 30_000);
});
