/**
 * Programs the model-based tests (model.test.ts) found and shrank, kept as regression tests: each
 * broke the contract on the code of its day (named beside it) and must pass from then on. Paste a
 * new one as model.test.ts prints it. A few seconds.
 */
import { it } from 'vitest';
import { replay } from './model/replay.js';

// Found with the fix of a key never held in `dual` reverted (a one-store phase did not lift its
// store's floor): a `to` holder got a token below the `from` holder before it. Found as memory ->
// etcd (seed -1054404372), where it depends on how far each store had counted; kept as redis ->
// memory, where Redis's clock tokens are always ahead.
it('regression: a key held in from, then in to, never in dual: the to token below the from one', () =>
  replay('redis -> memory', {
    clients: 2,
    keys: 1,
    steps: [
      { op: 'try', c: 0, k: 0 },
      { op: 'phase', c: 0, dir: 1 },
      { op: 'phase', c: 1, dir: 1 },
      { op: 'phase', c: 0, dir: 1 },
      { op: 'try', c: 0, k: 0 },
    ],
  }));

// The same, into a counter store from Redis's clock tokens. Seed 355912845.
it('regression: client 1 got token 1 for k0, not above the last, 1796431143274967', () =>
  replay('redis -> cassandra', {
    clients: 2,
    keys: 1,
    steps: [
      { op: 'try', c: 0, k: 0 },
      { op: 'phase', c: 0, dir: 1 },
      { op: 'phase', c: 1, dir: 1 },
      { op: 'phase', c: 1, dir: 1 },
      { op: 'try', c: 1, k: 0 },
    ],
  }));

// Found with ZooKeeper's multi-ops reading version 0 as any version again: the stale write landed
// last over the newer one on a resource written once. Seed 817032788.
it('regression: two writes of k0/r0 at once (tokens 177092, 177088): ok, ok, then it read 177088 "#2"', () =>
  replay('zookeeper', {
    clients: 2,
    keys: 1,
    steps: [
      { op: 'try', c: 0, k: 0 },
      { op: 'release', c: 0, k: 0 },
      { op: 'wait', c: 1, k: 0 },
      { op: 'write', c: 0, k: 0, r: 0, v: '' },
      { op: 'write', c: 1, k: 0, r: 0, v: '', race: 0 },
    ],
  }));

// Found with fence values unchecked: PostgreSQL failed on U+0000 as a store error, the other stores
// took it (and read a lone surrogate back as U+FFFD). Seeds -358053050, -1503416044.
for (const target of ['postgres', 'redis', 'zookeeper'])
  it(`regression: write(k0, …, "\\u0000") on ${target}: refused before any I/O, as the model says`, () =>
    replay(target, {
      clients: 2,
      keys: 1,
      steps: [
        { op: 'try', c: 0, k: 0 },
        { op: 'write', c: 0, k: 0, r: 0, v: '\u0000' },
        { op: 'write', c: 0, k: 0, r: 1, v: 'x\uD800' },
        { op: 'read', k: 0, r: 1 },
      ],
    }));
