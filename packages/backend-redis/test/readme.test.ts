import { createLocker } from '@deadbolt/core';
import { matrixUrl } from '@deadbolt/conformance';
import { redisBackend } from '@deadbolt/redis';
import { execFile } from 'node:child_process';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

// The plain JavaScript example of docs/faq.md, taken from the guide itself and run with node as a
// user would (from this package's folder, so its imports resolve; Redis at the matrix's address).
it('the FAQ plain JavaScript example runs as written on Node 20', async () => {
  const readme = await readFile(new URL('../../../docs/faq.md', import.meta.url), 'utf8');
  const example = /```js\n(\/\/ example\.mjs\n[\s\S]*?)```/.exec(readme)?.[1];
  expect(example, 'docs/faq.md has a ```js block starting "// example.mjs"').toBeDefined();
  expect(example).not.toContain('await using');
  const file = new URL(`../readme-example-${process.pid}.mjs`, import.meta.url);
  await writeFile(file, example!.replaceAll('redis://127.0.0.1:6379', matrixUrl('redis')));
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [file.pathname], { timeout: 30_000 });
    const [first, second] = [...stdout.matchAll(/token (\d+)/g)].map((m) => BigInt(m[1]!));
    expect(stdout).toMatch(/^holding invoice:42, fencing token \d+\nholding it again, token \d+\n$/);
    expect(second! > first!).toBe(true);
  } finally {
    await rm(file, { force: true });
  }
});

// The root README's example, verbatim apart from the stand-ins for the caller's storage.
it('the README example runs as written', async () => {
  const writes: bigint[] = [];
  const storage = { write: async (_invoice: object, opts: { fencingToken: bigint }) => void writes.push(opts.fencingToken) };
  const invoice = { id: 42 };

  const locker = createLocker(redisBackend({ url: matrixUrl('redis') }), { ttlMs: 15_000 });

  {
    await using lock = await locker.lock('invoice:42', { timeoutMs: 5_000 });
    await storage.write(invoice, { fencingToken: lock.token }); // the store rejects older tokens
    if (lock.signal.aborted) throw lock.signal.reason; // LockLostError: stop working
  } // released here, also when the block throws

  const maybe = await locker.tryLock('invoice:42'); // Lock | null, never waits
  expect(maybe).not.toBeNull();
  await maybe?.release();
  await locker.withLock('invoice:42', async (lock) => {
    writes.push(lock.token);
  });
  await locker.close();
  expect(writes.length).toBe(2);
  expect(writes[1]! > writes[0]!).toBe(true);
});

// The semaphore and read-write lock example of docs/semantics.md, verbatim apart from the stand-ins.
it('the semantics guide semaphore and read-write lock example runs as written', async () => {
  const puts: bigint[] = [];
  const storage = { put: async (_file: object, opts: { fencingToken: bigint }) => void puts.push(opts.fencingToken) };
  const file = { name: 'a' };
  const locker = createLocker(redisBackend({ url: matrixUrl('redis') }), { ttlMs: 15_000 });
  let reads = 0;
  let writes = 0;

  {
    const uploads = locker.semaphore('uploads', { limit: 4 }); // at most 4 holders, across processes
    await using permit = await uploads.acquire({ timeoutMs: 10_000 });
    await storage.put(file, { fencingToken: permit.token });
  }

  const config = locker.readWriteLock('config');
  await config.withRead(async (read) => {
    reads++;
    expect(read.held).toBe(true); /* any number of readers at once */
  });
  await config.withWrite(async (write) => {
    writes++;
    expect(write.held).toBe(true); /* one writer, nobody else */
  });

  await locker.close();
  expect([puts.length, reads, writes]).toEqual([1, 1, 1]);
});

// The README's lockAll and reentrancy example, verbatim apart from the stand-ins.
it('the README lockAll and reentrancy example runs as written', async () => {
  const backend = redisBackend({ url: matrixUrl('redis') });
  const locker = createLocker(redisBackend({ url: matrixUrl('redis') }), { ttlMs: 15_000 });
  const moves: ReadonlyMap<string, bigint>[] = [];
  const ledger = {
    move: async (_from: number, _to: number, _amount: number, opts: { fencingTokens: ReadonlyMap<string, bigint> }) =>
      void moves.push(opts.fencingTokens),
  };
  const [from, to, amount] = [1, 2, 10];
  let rebuilt = 0;
  const rebuildIndex = async () => void rebuilt++;

  // All or nothing, in one canonical order: two transfers over the same accounts never deadlock.
  await locker.withLockAll(
    [`account:${from}`, `account:${to}`],
    async (both) => {
      await ledger.move(from, to, amount, { fencingTokens: both.tokens });
    },
    { timeoutMs: 5_000 },
  );

  const nested = createLocker(backend, { reentrant: true });
  await nested.withLock('report', async () => {
    await nested.withLock('report', rebuildIndex); // same lease and token; no wait
  });

  await Promise.all([locker.close(), nested.close()]);
  expect(moves[0]!.size).toBe(2);
  expect(rebuilt).toBe(1);
});

// The README's inspect example, verbatim apart from console.log collected.
it('the README inspect example runs as written', async () => {
  const lines: string[] = [];
  const console = { log: (line: string) => void lines.push(line) };
  const locker = createLocker(redisBackend({ url: matrixUrl('redis') }), { ttlMs: 15_000 });
  const held = await locker.lock('invoice:42');

  const { holders, waiters } = await locker.inspect('invoice:42');
  for (const h of holders) console.log(`held by ${h.owner}, token ${h.token}, ${h.ttlLeftMs ?? 'session'} ms left`);
  console.log(waiters === null ? 'waiters: not visible in this store' : `${waiters.length} waiting`);

  await held.release();
  await locker.close();
  expect(lines[0]).toMatch(new RegExp(`^held by ${held.owner}, token ${held.token}, \\d+ ms left$`));
  expect(lines[1]).toBe('0 waiting');
});
