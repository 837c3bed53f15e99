import { createLocker } from '@deadbolt/core';
import { matrixUrl } from '@deadbolt/conformance';
import { redisBackend } from '@deadbolt/redis';
import { expect, it } from 'vitest';

// The root README's example, verbatim apart from the stand-ins for the caller's storage.
it('the README example runs as written', async () => {
  const writes: bigint[] = [];
  const storage = { write: async (_invoice: object, opts: { fencingToken: bigint }) => void writes.push(opts.fencingToken) };
  const invoice = { id: 42 };

  const locker = createLocker(redisBackend({ url: matrixUrl('redis') }), { ttlMs: 15_000 });

  {
    await using lock = await locker.lock('invoice:42', { timeoutMs: 5_000 });
    await storage.write(invoice, { fencingToken: lock.token }); // the store rejects older tokens
    if (lock.signal.aborted) throw lock.signal.reason;          // LockLostError: stop working
  } // released here, also when the block throws

  const maybe = await locker.tryLock('invoice:42');             // Lock | null, never waits
  expect(maybe).not.toBeNull();
  await maybe?.release();
  await locker.withLock('invoice:42', async (lock) => { writes.push(lock.token); });
  await locker.close();
  expect(writes.length).toBe(2);
  expect(writes[1]! > writes[0]!).toBe(true);
});
