// PostgreSQL hand-offs directly and through PgBouncer (test-matrix's pgbouncer profile): a holder
// releases while a second client waits, N times; prints the time from the release's start to the
// waiter's grant (p50, p90) and the bare uncontended lock + release, per connection path and mode.
// Through pooling by transaction a release's notification reaches nobody, so the waiter finds the
// key free at its next re-check (maxPollDelayMs, 250 ms by default).
// Run: node packages/bench/experiments/pgbouncer-handoff.mjs [N=200]
import { createLocker } from '@deadbolt/core';
import { postgresBackend } from '@deadbolt/postgres';

const n = Number(process.argv[2] ?? 200);
const paths = [
  ['direct, lease mode', 'postgres://postgres@127.0.0.1:5432/postgres', 'lease'],
  ['PgBouncer transaction pooling, lease mode', 'postgres://postgres@127.0.0.1:6432/deadbolt_tx', 'lease'],
  ['PgBouncer session pooling, lease mode', 'postgres://postgres@127.0.0.1:6432/deadbolt_session', 'lease'],
  ['direct, session mode', 'postgres://postgres@127.0.0.1:5432/postgres', 'session'],
  ['PgBouncer session pooling, session mode', 'postgres://postgres@127.0.0.1:6432/deadbolt_session', 'session'],
];
const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];

for (const [name, url, mode] of paths) {
  const [a, b] = [0, 1].map(() => createLocker(postgresBackend({ url, mode }), { ttlMs: 10_000 }));
  const key = `handoff/${Math.random().toString(36).slice(2)}`;
  const started = performance.now();
  for (let i = 0; i < n; i++) await (await a.lock(key)).release();
  const cycleMs = (performance.now() - started) / n;
  const handoffs = [];
  for (let i = 0; i < n; i++) {
    const held = await a.lock(key);
    const waiting = b.lock(key, { timeoutMs: 10_000 });
    await new Promise((resolve) => setTimeout(resolve, 20)); // the waiter is queued
    const releasedAt = performance.now();
    await held.release();
    const next = await waiting;
    handoffs.push(performance.now() - releasedAt);
    await next.release();
  }
  handoffs.sort((x, y) => x - y);
  console.log(
    `${name}: lock + release ${cycleMs.toFixed(2)} ms; hand-off p50 ${pct(handoffs, 0.5).toFixed(1)} ms, p90 ${pct(handoffs, 0.9).toFixed(1)} ms`,
  );
  await Promise.all([a.close(), b.close()]);
}
