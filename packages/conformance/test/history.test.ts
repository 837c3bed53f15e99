// The history checker's own tests: hand-written histories it must pass and fail, then real runs of
// the workload on memory lockers: a broken backend (every worker its own lock table) and an
// unfenced register under a pause must fail; the same runs done right must pass.
import { createLocker, memoryBackend, memoryFence, MemoryLockStore, type Locker } from '@deadbolt/core';
import { checkHistory, HistoryRecorder, runWorker, type HistoryEvent, type Resource } from '@deadbolt/conformance/history';
import { afterEach, describe, expect, it } from 'vitest';

/** A history from lines `[time, process, op, type, id, extra]`, times in ms. */
function history(lines: [number, string, HistoryEvent['op'], HistoryEvent['type'], number, Partial<HistoryEvent>?][]): HistoryEvent[] {
  return lines.map(([time, process, op, type, id, extra]) => ({ time, process, op, type, id, key: 'k', ...extra }));
}

/** An acquire granted at `granted` with `token`, believed until `until` (a held check), released then. */
function hold(process: string, id: number, asked: number, granted: number, until: number, token: bigint) {
  return [
    [asked, process, 'acquire', 'invoke', id],
    [granted, process, 'acquire', 'ok', id, { token }],
    [until, process, 'held', 'info', 0, { token }],
    [until, process, 'release', 'invoke', id + 1000, { token }],
    [until + 1, process, 'release', 'ok', id + 1000, { token }],
  ] as [number, string, HistoryEvent['op'], HistoryEvent['type'], number, Partial<HistoryEvent>?][];
}

describe('history checker on written histories', () => {
  it('passes holds one after another with rising tokens', () => {
    const check = checkHistory(history([...hold('a', 1, 0, 1, 10, 1n), ...hold('b', 2, 5, 11, 20, 2n), ...hold('a', 3, 15, 21, 30, 3n)]));
    expect(check).toMatchObject({ valid: true, holds: 3, overlaps: [], tokenAnomalies: [] });
  });

  it('finds two believed holds at once, a duplicate token and a token that went down', () => {
    const overlap = checkHistory(history([...hold('a', 1, 0, 1, 50, 1n), ...hold('b', 2, 5, 30, 60, 2n)]));
    expect(overlap.valid).toBe(false);
    expect(overlap.overlaps).toHaveLength(1);
    expect(overlap.overlaps[0]!.holds.map((h) => h.process).sort()).toEqual(['a', 'b']);
    const duplicate = checkHistory(history([...hold('a', 1, 0, 1, 10, 7n), ...hold('b', 2, 11, 12, 20, 7n)]));
    expect(duplicate.tokenAnomalies).toMatchObject([{ why: 'duplicate' }]);
    // b asked after a was granted, yet got a lower token.
    const down = checkHistory(history([...hold('a', 1, 0, 1, 10, 5n), ...hold('b', 2, 11, 12, 20, 4n)]));
    expect(down.tokenAnomalies).toMatchObject([{ why: 'not increasing', earlier: { token: 5n }, later: { token: 4n } }]);
    // Concurrent asks may be granted in either token order only if neither was granted before the other asked.
    const concurrent = checkHistory(history([...hold('a', 1, 0, 5, 10, 5n), ...hold('b', 2, 1, 11, 20, 4n)]));
    expect(concurrent.tokenAnomalies).toEqual([]);
  });

  it('a holder paused past its lease is believed only until its last check: its loss, seen when it runs again, is no overlap', () => {
    const check = checkHistory(
      history([
        [0, 'a', 'acquire', 'invoke', 1],
        [1, 'a', 'acquire', 'ok', 1, { token: 1n }],
        [2, 'a', 'held', 'info', 0, { token: 1n }],
        // a is stopped from 3 to 80; b takes the key after a's lease ran out.
        ...hold('b', 2, 10, 40, 60, 2n),
        [80, 'a', 'lost', 'info', 0, { token: 1n }],
      ]),
    );
    expect(check).toMatchObject({ valid: true, overlaps: [] });
  });

  it('an acquire with an unknown outcome is no hold; one never answered after the heal is a liveness failure', () => {
    const lines = history([
      [0, 'a', 'acquire', 'invoke', 1],
      [4000, 'a', 'acquire', 'unknown', 1, { code: 'BACKEND_UNAVAILABLE' }],
      ...hold('b', 2, 10, 20, 30, 1n),
      [100, 'c', 'acquire', 'invoke', 3],
      [200, '', 'heal', 'info', 0],
      [40_000, 'b', 'held', 'info', 0, { token: 1n }],
    ]);
    const check = checkHistory(lines, { livenessGraceMs: 30_000 });
    expect(check.holds).toBe(1);
    expect(check.neverGranted).toMatchObject([{ process: 'c', invoked: 100 }]);
    expect(checkHistory(lines, { livenessGraceMs: 60_000 }).neverGranted).toEqual([]);
  });

  it('finds a stale write accepted, a write wrongly refused; an unknown write excuses a refusal', () => {
    const w = (time: number, id: number, type: HistoryEvent['type'], token: bigint, code?: string): HistoryEvent => ({
      time,
      id,
      type,
      token,
      process: 'p',
      op: 'write',
      key: 'k',
      resource: 'r',
      ...(code ? { code } : {}),
    });
    const stale = checkHistory([w(0, 1, 'invoke', 5n), w(1, 1, 'ok', 5n), w(2, 2, 'invoke', 4n), w(3, 2, 'ok', 4n)]);
    expect(stale.staleWrites).toMatchObject([{ resource: 'r', token: 4n, after: 5n }]);
    // Sent before the higher one was accepted: the two raced, and either order is right.
    const raced = checkHistory([w(0, 1, 'invoke', 5n), w(0, 2, 'invoke', 4n), w(1, 1, 'ok', 5n), w(2, 2, 'ok', 4n)]);
    expect(raced.staleWrites).toEqual([]);
    const excused = checkHistory([
      w(0, 1, 'invoke', 6n),
      w(1, 1, 'unknown', 6n),
      w(2, 2, 'invoke', 5n),
      w(3, 2, 'fail', 5n, 'STALE_TOKEN'),
    ]);
    expect(excused).toMatchObject({ valid: true, wrongRefusals: [] });
    const wrong = checkHistory([w(0, 1, 'invoke', 5n), w(1, 1, 'ok', 5n), w(2, 2, 'invoke', 7n), w(3, 2, 'fail', 7n, 'STALE_TOKEN')]);
    expect(wrong.wrongRefusals).toMatchObject([{ token: 7n }]);
  });

  it('judges semaphores by their limit and read-write locks by mode', () => {
    const three = history([...hold('a', 1, 0, 1, 50, 1n), ...hold('b', 2, 0, 2, 50, 2n), ...hold('c', 3, 0, 3, 50, 3n)]);
    expect(checkHistory(three, { model: () => ({ kind: 'semaphore', limit: 3 }) }).valid).toBe(true);
    expect(checkHistory(three, { model: () => ({ kind: 'semaphore', limit: 2 }) }).overlaps).toHaveLength(1);
    const readers = three.map((e) => (e.op === 'acquire' && e.type === 'ok' ? { ...e, mode: 'shared' as const } : e));
    expect(checkHistory(readers, { model: () => ({ kind: 'read-write' }) }).valid).toBe(true);
    const writerAmong = readers.map((e) =>
      e.process === 'b' && e.op === 'acquire' && e.type === 'ok' ? { ...e, mode: 'exclusive' as const } : e,
    );
    expect(checkHistory(writerAmong, { model: () => ({ kind: 'read-write' }) }).overlaps.length).toBeGreaterThan(0);
  });

  it('measures the longest time someone waited while nobody held the key', () => {
    const check = checkHistory(
      history([
        [10, 'a', 'acquire', 'invoke', 1],
        [30, 'a', 'acquire', 'ok', 1, { token: 1n }],
        [40, 'a', 'held', 'info', 0, { token: 1n }],
        [40, 'a', 'release', 'invoke', 2, { token: 1n }],
        [41, 'a', 'release', 'ok', 2, { token: 1n }],
        [45, 'b', 'acquire', 'invoke', 3],
        [52, 'b', 'acquire', 'ok', 3, { token: 2n }],
      ]),
    );
    expect(check.longestUnavailableMs).toBe(20);
  });
});

describe('history checker on real runs', () => {
  const lockers: Locker[] = [];
  afterEach(async () => {
    await Promise.all(lockers.splice(0).map((l) => l.close()));
  });
  const locker = (store: MemoryLockStore, options: { autoRenew?: boolean } = {}) => {
    const made = createLocker(memoryBackend({ store }), { ttlMs: 200, ...options });
    lockers.push(made);
    return made;
  };
  /** The workers run `ms`, and on a loaded machine on until the history holds a dozen holds (at most 10 s): enough to judge. */
  const run = async (lockersOf: Locker[], resource: Resource, ms: number) => {
    const recorder = new HistoryRecorder();
    const started = performance.now();
    const stopper = new AbortController();
    const stop = stopper.signal;
    const watch = setInterval(() => {
      const elapsed = performance.now() - started;
      if (elapsed >= 10_000 || (elapsed >= ms && checkHistory(recorder.events).holds >= 12)) stopper.abort();
    }, 25);
    stop.addEventListener('abort', () => clearInterval(watch));
    await Promise.all(
      lockersOf.map((l, i) =>
        runWorker(recorder.worker(`w${i}`), l, { key: 'k', holdMs: 10, timeoutMs: 2000, stop, resource: { name: 'r', target: resource } }),
      ),
    );
    return checkHistory(recorder.events);
  };

  it('three workers sharing one lock table and a fence: valid, with holds and writes', async () => {
    const store = new MemoryLockStore();
    const check = await run([locker(store), locker(store), locker(store)], memoryFence(), 400);
    expect(
      check.valid,
      JSON.stringify(check, (_k, v) => (typeof v === 'bigint' ? String(v) : v)),
    ).toBe(true);
    expect(check.holds).toBeGreaterThan(10);
  });

  it('a broken backend (every worker its own lock table): overlapping holds and duplicate tokens', async () => {
    const check = await run(
      [locker(new MemoryLockStore()), locker(new MemoryLockStore()), locker(new MemoryLockStore())],
      memoryFence(),
      300,
    );
    expect(check.valid).toBe(false);
    expect(check.overlaps.length).toBeGreaterThan(0);
    expect(check.tokenAnomalies.some((a) => a.why === 'duplicate')).toBe(true);
  });

  for (const fenced of [false, true]) {
    it(`a holder paused past its lease with a write on its way: ${fenced ? 'a fence refuses it (valid)' : 'an unfenced register takes it (a stale write)'}`, async () => {
      const store = new MemoryLockStore();
      const recorder = new HistoryRecorder();
      // An unfenced register takes every write; record what it was given, as the history does.
      const resource: Resource = fenced ? memoryFence() : { write: async () => undefined };
      const paused = recorder.worker('paused');
      const asked = paused.invoke('acquire', 'k');
      const lock = await locker(store, { autoRenew: false }).lock('k');
      paused.complete(asked, 'acquire', 'k', 'ok', { token: lock.token });
      paused.held('k', lock.token); // checked, decided to write, then stopped past its lease
      const stop = AbortSignal.timeout(400);
      const others = runWorker(recorder.worker('other'), locker(store), {
        key: 'k',
        holdMs: 10,
        timeoutMs: 2000,
        stop,
        resource: { name: 'r', target: resource },
      });
      await new Promise((resolve) => setTimeout(resolve, 300));
      const sent = paused.invoke('write', 'k', { token: lock.token, resource: 'r' });
      await resource.write('r', lock.token, 'late').then(
        () => paused.complete(sent, 'write', 'k', 'ok', { token: lock.token, resource: 'r' }),
        (error: { code?: string }) =>
          paused.complete(sent, 'write', 'k', 'fail', { token: lock.token, resource: 'r', code: error.code ?? '' }),
      );
      expect(lock.held).toBe(false);
      paused.lost('k', lock.token);
      await others;
      const check = checkHistory(recorder.events);
      expect(check.overlaps).toEqual([]);
      if (fenced) expect(check.valid).toBe(true);
      else expect(check.staleWrites).toMatchObject([{ resource: 'r', token: lock.token }]);
    });
  }
});
