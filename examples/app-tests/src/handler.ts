// An HTTP handler that changes an account's balance under the account's lock and stores the new
// balance through a fence with the lock's token. The fence is what protects the balance: a request
// whose lock ran out while it was slow (a pause, a slow read) is refused when it writes, after a
// request that took the lock over wrote. handler.node-test.ts tests it with node:test.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { LockLostError, LockTimeoutError, StaleTokenError, type Fence, type Locker } from '@deadbolt/core';

/** Where the handler reads balances (the application's database). */
export type ReadBalance = (account: string) => Promise<number>;

/**
 * Handles `POST /accounts/<id>/add?amount=<n>`: 200 with the new balance; 409 when the lock was
 * lost before the request ended (its write, if it came after a later holder's, was refused by the
 * fence); 503 when the lock could not be taken in 2 s. Anything else the store throws is a 500.
 */
export function balanceHandler(locker: Locker, balances: Fence, read: ReadBalance) {
  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const match = /^\/accounts\/([\w-]+)\/add$/.exec(url.pathname);
    const amount = Number(url.searchParams.get('amount'));
    if (req.method !== 'POST' || !match || !Number.isFinite(amount))
      return reply(res, 400, { error: 'POST /accounts/<id>/add?amount=<n>' });
    const account = match[1]!;
    try {
      const balance = await locker.withLock(
        `account:${account}`,
        async (lock) => {
          const next = (await read(account)) + amount;
          await balances.write(`balance:${account}`, lock.token, String(next));
          return next;
        },
        { timeoutMs: 2_000 },
      );
      reply(res, 200, { account, balance });
    } catch (error) {
      if (error instanceof StaleTokenError || error instanceof LockLostError)
        return reply(res, 409, { error: 'the account changed meanwhile: retry' });
      if (error instanceof LockTimeoutError) return reply(res, 503, { error: 'the account is busy' });
      reply(res, 500, { error: String(error) });
    }
  };
}

function reply(res: ServerResponse, status: number, body: object): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}
