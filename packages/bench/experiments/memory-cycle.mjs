// The memory backend's bare lock cycle (`await lock(); await release()` on one key, no contention),
// without the benchmark's per-cycle clock reads: the figure the core README's "What a hold costs
// in this process" quotes. 200 000 warm-up cycles, then 5 runs of N / 5; prints the median rate.
// Run: node packages/bench/experiments/memory-cycle.mjs [N=1000000] [path to a core build's dist/index.js]
// (a second path lets two builds, say before and after a change, run one after the other).
// DEADBOLT_SUBSCRIBE=1: a no-op subscriber on every deadbolt diagnostics channel (the cost of being traced).
import { subscribe, tracingChannel } from 'node:diagnostics_channel';
import { pathToFileURL } from 'node:url';

if (process.env.DEADBOLT_SUBSCRIBE === '1') {
  const none = () => undefined;
  for (const name of ['acquire', 'release', 'extend'])
    tracingChannel(`deadbolt:${name}`).subscribe({ start: none, end: none, asyncStart: none, asyncEnd: none, error: none });
  for (const name of ['renewal-failed', 'lease-lost', 'wait-abandoned', 'store-unavailable']) subscribe(`deadbolt:${name}`, none);
}

const n = Number(process.argv[2] ?? 1_000_000);
const core = process.argv[3] ? await import(pathToFileURL(process.argv[3]).href) : await import('@deadbolt/core');
const locker = core.createLocker(core.memoryBackend({ store: new core.MemoryLockStore() }), { ttlMs: 30_000 });

async function rate(cycles) {
  const started = performance.now();
  for (let i = 0; i < cycles; i++) await (await locker.lock('k')).release();
  return cycles / ((performance.now() - started) / 1000);
}

await rate(200_000);
const rates = [];
for (let run = 0; run < 5; run++) rates.push(await rate(n / 5));
rates.sort((a, b) => a - b);
console.log(`memory lock + release: median ${(rates[2] / 1e6).toFixed(2)} M/s (runs: ${rates.map((r) => (r / 1e6).toFixed(2)).join(' ')})`);
await locker.close();
