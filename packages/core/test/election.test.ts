// Core's side of elections and once-per-fleet jobs (the stores' sides are conformance behaviours
// 38 and 39): bad input refused before any store call, the rules that need no store (a second
// campaign in one locker, publishing after resigning, a job's window), a session store's run
// marker, and a migration's dual phase. On the memory backend; about a second.
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { createLocker, memoryBackend, memoryFence, MemoryLockStore, migratingBackend, type Fence, type Locker } from '../src/index.js';
import { wrapBackend } from '../src/testing.js';

const memory = (store = new MemoryLockStore()) => memoryBackend({ store });

/** A locker on a memory backend that counts its store calls, with a fence that counts its own. */
function counted(options: { fence?: boolean } = {}) {
  const calls = { store: 0 };
  const store = new MemoryLockStore();
  const inner = memory(store);
  const backend = wrapBackend(inner, {
    acquire: (req) => (calls.store++, inner.acquire(req)),
    inspect: (key, space) => (calls.store++, inner.inspect!(key, space)),
  });
  const plain = memoryFence();
  const fence: Fence = {
    write: (...args) => (calls.store++, plain.write(...args)),
    read: (resource) => (calls.store++, plain.read(resource)),
    close: () => plain.close(),
  };
  return { calls, store, fence, locker: createLocker(backend, { ttlMs: 1000, ...(options.fence === false ? {} : { fence }) }) };
}

describe('elections and once-per-fleet jobs: input', () => {
  it('bad names, values, options and jobs are InvalidArgumentError before any store call', async () => {
    const { calls, locker } = counted();
    const job = () => 1;
    const bad: [string, () => Promise<unknown>][] = [
      ['empty name', () => locker.elect('', { value: 'a' })],
      ['name leaving no room for its keys', () => locker.elect('x'.repeat(1020), { value: 'a' })],
      ['name not a string', () => locker.leader(5 as unknown as string)],
      ['no value', () => locker.elect('e', {} as { value: string })],
      ['value not a string', () => locker.tryElect('e', { value: 5 as unknown as string })],
      ['value too long', () => locker.elect('e', { value: 'x'.repeat(65_537) })],
      ['misspelt option', () => locker.elect('e', { value: 'a', timeout: 5 } as unknown as { value: string })],
      ['timeoutMs on a single attempt', () => locker.tryElect('e', { value: 'a', timeoutMs: 5 } as unknown as { value: string })],
      ['ttl the backend refuses', () => locker.elect('e', { value: 'a', ttlMs: 0 })],
      ['job not a function', () => locker.runOnce('j', 5 as unknown as () => number, { lockAtMostForMs: 1000 })],
      ['no lockAtMostForMs', () => locker.runOnce('j', job, {} as { lockAtMostForMs: number })],
      ['lockAtLeastForMs above lockAtMostForMs', () => locker.runOnce('j', job, { lockAtMostForMs: 1000, lockAtLeastForMs: 1001 })],
      ['negative lockAtLeastForMs', () => locker.runOnce('j', job, { lockAtMostForMs: 1000, lockAtLeastForMs: -1 })],
      ['runOnce name', () => locker.runOnce('', job, { lockAtMostForMs: 1000 })],
    ];
    for (const [what, call] of bad) await expect(call(), what).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(() => locker.observe('e', { intervalMs: 0 }), 'observe checks at the call').toThrow(/intervalMs/);
    expect(() => locker.observe('', {})).toThrow(/name/);
    expect(calls.store).toBe(0);
    await locker.close();
  });

  it('elect, tryElect, leader and observe without a fence on the locker: InvalidArgumentError saying so; runOnce needs none', async () => {
    const { calls, locker } = counted({ fence: false });
    await expect(locker.elect('e', { value: 'a' })).rejects.toThrow(/fence option/);
    await expect(locker.tryElect('e', { value: 'a' })).rejects.toThrow(/fence option/);
    await expect(locker.leader('e')).rejects.toThrow(/fence option/);
    expect(() => locker.observe('e')).toThrow(/fence option/);
    expect(calls.store).toBe(0);
    expect(await locker.runOnce('j', () => 7, { lockAtMostForMs: 1000 })).toMatchObject({ ran: true, result: 7 });
    expect(() => createLocker(memory(), { fence: {} as Fence })).toThrow(/fence must be a Fence/);
    await locker.close();
  });
});

describe('elections and once-per-fleet jobs: rules', () => {
  it('a second campaign in one locker is SelfDeadlockError, never a second term; after a resignation or a loss it is allowed', async () => {
    const { locker, store, fence } = counted();
    const term = await locker.elect('e', { value: 'a' });
    await expect(locker.elect('e', { value: 'b' })).rejects.toMatchObject({ code: 'SELF_DEADLOCK' });
    await expect(locker.tryElect('e', { value: 'b' })).rejects.toMatchObject({ code: 'SELF_DEADLOCK' });
    await term.resign();
    await expect(term.proclaim('late')).rejects.toMatchObject({ code: 'NOT_OWNER' });
    const next = await locker.elect('e', { value: 'b' });
    expect(next.term).toBe(2);
    await next.resign();
    // A campaign that failed does not count either.
    const other = createLocker(memory(store), { fence });
    const held = await other.elect('f', { value: 'other' });
    await expect(locker.elect('f', { value: 'a', timeoutMs: 0 })).rejects.toMatchObject({ code: 'LOCK_TIMEOUT' });
    await held.resign();
    await expect(locker.elect('f', { value: 'a', timeoutMs: 0 })).resolves.toMatchObject({ term: 2 });
    await Promise.all([locker.close(), other.close()]);
  });

  it('proclaims land in the order called; the last one stands', async () => {
    const { locker } = counted();
    const term = await locker.elect('e', { value: 'v0' });
    await Promise.all(Array.from({ length: 10 }, (_, i) => term.proclaim(`v${i + 1}`)));
    expect(term.value).toBe('v10');
    expect((await locker.leader('e'))?.value).toBe('v10');
    await locker.close();
  });

  it("a session store keeps a job's run marker in this process and gives it back when the window is over", async () => {
    const inner = memory();
    const session = wrapBackend(inner, { capabilities: { ...inner.capabilities, lease: 'session' } });
    const [a, b] = [createLocker(session, { ttlMs: 1000 }), createLocker(memoryBackend({ store: inner.store }), { ttlMs: 1000 })];
    const opts = { lockAtMostForMs: 1000, lockAtLeastForMs: 300 };
    expect(await a.runOnce('j', () => 1, opts)).toMatchObject({ ran: true });
    expect(await b.runOnce('j', () => 2, opts)).toEqual({ ran: false, reason: 'ran-recently' });
    await sleep(400);
    expect(await b.runOnce('j', () => 3, opts)).toMatchObject({ ran: true, result: 3 });
    await Promise.all([a.close(), b.close()]);
  });

  it("a migration's dual phase (no holder tokens shown) still names the leader, by its owner, with the term's token", async () => {
    const fence = memoryFence();
    const [from, to] = [new MemoryLockStore(), new MemoryLockStore()];
    const dual = (): Locker => createLocker(migratingBackend({ from: memory(from), to: memory(to), phase: 'dual' }), { fence });
    const [a, watcher] = [dual(), dual()];
    const term = await a.elect('e', { value: 'a' });
    expect(await watcher.leader('e')).toMatchObject({ value: 'a', term: 1, token: term.token });
    await term.resign();
    expect(await watcher.leader('e')).toBeNull();
    await Promise.all([a.close(), watcher.close()]);
  });
});
