// The balance handler (handler.ts) tested with node:test (run: node --test dist/handler.node-test.js)
// over a real HTTP server on a test locker: two requests on one account, the first of which reads
// slowly and loses its lock meanwhile; its write is refused, and the balance is the second's.
/* eslint-disable @typescript-eslint/no-floating-promises -- node:test's test() returns a promise its runner awaits */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { after, before, test } from 'node:test';
import { createTestLocker, type TestLocker } from '@deadbolt/core/testing';
import { balanceHandler } from './handler.js';

let t: TestLocker;
let server: Server;
let base: string;
/** Reads the test holds back (a slow database). */
const heldBack: (() => void)[] = [];
let holdNextRead = false;

before(async () => {
  t = createTestLocker({ ttlMs: 10_000 });
  const read = async (account: string) => {
    if (holdNextRead) {
      holdNextRead = false;
      await new Promise<void>((resolve) => heldBack.push(resolve));
    }
    return Number((await t.fence.read(`balance:${account}`))?.value ?? 100);
  };
  server = createServer(balanceHandler(t.locker, t.fence, read));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  assert.ok(address && typeof address === 'object');
  base = `http://127.0.0.1:${address.port}`;
});

after(async () => {
  server.close();
  await t.close();
});

const add = (amount: number) => fetch(`${base}/accounts/acc-1/add?amount=${amount}`, { method: 'POST' });

test('adds to the balance under the lock and stores it with the lock token', async () => {
  const response = await add(5);
  assert.equal(response.status, 200);
  assert.deepEqual(await response.json(), { account: 'acc-1', balance: 105 });
  assert.equal((await t.fence.read('balance:acc-1'))?.value, '105');
});

test("a request that loses its lock while it reads is refused, and the next holder's balance stands", async () => {
  holdNextRead = true;
  const slow = add(1);
  while (heldBack.length === 0) await new Promise((resolve) => setImmediate(resolve));
  // The slow request's lease lapses (its process paused, say); the next request takes the lock.
  assert.equal(t.expire('account:acc-1'), 1);
  const fast = await add(50);
  assert.equal(fast.status, 200);
  assert.equal(((await fast.json()) as { balance: number }).balance, 155);
  heldBack.shift()!();
  assert.equal((await slow).status, 409);
  assert.equal((await t.fence.read('balance:acc-1'))?.value, '155');
});

test('answers 503 when the account stays locked past the handler timeout', async () => {
  const other = await t.newLocker().lock('account:acc-1');
  const waiting = add(1);
  // The handler waits on the test clock: 2 s there, however long it takes here.
  await new Promise((resolve) => setTimeout(resolve, 50));
  await t.clock.advance(2_000);
  assert.equal((await waiting).status, 503);
  await other.release();
});
