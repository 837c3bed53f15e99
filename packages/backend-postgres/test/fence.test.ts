// The PostgreSQL fence in the caller's own transactions (what behaviour 36 cannot show on every
// store): the guard orders concurrent transactions by token, a stale one writes nothing, and the
// fenced-write example of docs/fencing.md runs as written.
import { createLocker, StaleTokenError } from '@deadbolt/core';
import { closeLockersAfterEach, matrixUrl } from '@deadbolt/conformance';
import { postgresBackend, postgresFence } from '@deadbolt/postgres';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const url = matrixUrl('postgres');
const admin = new pg.Pool({ connectionString: url, max: 4 });
const track = closeLockersAfterEach();
const fence = postgresFence({ url });
const resource = () => `postgres-fence-test/${Math.random().toString(36).slice(2)}`;

beforeAll(async () => {
  await admin.query('CREATE TABLE IF NOT EXISTS deadbolt_fence_test (id text PRIMARY KEY, status text)');
  await admin.query('CREATE TABLE IF NOT EXISTS invoices (id int PRIMARY KEY, status text)');
  await admin.query("INSERT INTO invoices VALUES (42, 'open') ON CONFLICT (id) DO UPDATE SET status = 'open'");
});

afterAll(async () => {
  await fence.close();
  await admin.query('DROP TABLE IF EXISTS deadbolt_fence_test, invoices');
  await admin.end();
});

/** A transaction of its own on one connection of `admin`. */
async function transaction() {
  const tx = await admin.connect();
  await tx.query('BEGIN');
  return tx;
}

describe('postgres fence', () => {
  it('guard: a newer token waits for an older one in flight, then an older token is refused and its writes roll back', async () => {
    const r = resource();
    const older = await transaction();
    await fence.guard(older, r, 5n);
    await older.query('INSERT INTO deadbolt_fence_test VALUES ($1, $2)', [r, 'older']);
    // The newer writer's guard waits on the resource's row until the older transaction ends.
    const newer = await transaction();
    let guarded = false;
    const newerGuard = fence.guard(newer, r, 6n).then(() => (guarded = true));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(guarded).toBe(false);
    await older.query('COMMIT');
    older.release();
    await newerGuard;
    await newer.query('UPDATE deadbolt_fence_test SET status = $2 WHERE id = $1', [r, 'newer']);
    await newer.query('COMMIT');
    newer.release();
    // The older holder comes back with another write: refused, and its transaction writes nothing.
    const late = await transaction();
    const refused = await fence.guard(late, r, 5n).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(StaleTokenError);
    expect(refused).toMatchObject({ code: 'STALE_TOKEN', resource: r, token: 5n, highest: 6n });
    await late.query('ROLLBACK');
    late.release();
    expect((await admin.query('SELECT status FROM deadbolt_fence_test WHERE id = $1', [r])).rows).toEqual([{ status: 'newer' }]);
    expect((await fence.read(r))?.token).toBe(6n);
  });

  it("transaction: commits what the function wrote; rolls back on a stale token (the function never runs) and on the function's own error", async () => {
    const r = resource();
    await fence.transaction(r, 7n, (tx) => tx.query('INSERT INTO deadbolt_fence_test VALUES ($1, $2)', [r, 'seven']));
    let ran = false;
    await expect(
      fence.transaction(r, 6n, async () => {
        ran = true;
      }),
    ).rejects.toMatchObject({ code: 'STALE_TOKEN', highest: 7n });
    expect(ran).toBe(false);
    const mine = new Error('the function failed');
    await expect(
      fence.transaction(r, 8n, async (tx) => {
        await tx.query('UPDATE deadbolt_fence_test SET status = $2 WHERE id = $1', [r, 'eight']);
        throw mine;
      }),
    ).rejects.toBe(mine);
    expect((await admin.query('SELECT status FROM deadbolt_fence_test WHERE id = $1', [r])).rows).toEqual([{ status: 'seven' }]);
    // The rolled-back transaction's token did not count either.
    expect((await fence.read(r))?.token).toBe(7n);
  });

  it('refuses bad options before connecting, and fails typed when the server cannot be reached', async () => {
    expect(() => postgresFence({ url: 'mysql://x' })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => postgresFence({ url, table: 'Bad-Name' })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => postgresFence({} as never)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    const away = postgresFence({ url: 'postgres://postgres@127.0.0.1:1/postgres' });
    await expect(away.write(resource(), 1n, 'x')).rejects.toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
    await away.close();
  });

  // The fenced-write example of docs/fencing.md, verbatim apart from the table it updates.
  it('the README fenced-write example runs as written', async () => {
    const locker = track(createLocker(postgresBackend({ url }), { ttlMs: 15_000 }));
    const fence = postgresFence({ url });

    await locker.withLock('invoice:42', async (lock) => {
      // One transaction: refused with StaleTokenError, and rolled back, if a newer holder of
      // invoice:42 has written since; otherwise the fence's row stays locked until the commit.
      await fence.transaction('invoice:42', lock.token, async (tx) => {
        await tx.query('UPDATE invoices SET status = $1 WHERE id = $2', ['paid', 42]);
      });
    });
    await fence.close();

    expect((await admin.query('SELECT status FROM invoices WHERE id = 42')).rows).toEqual([{ status: 'paid' }]);
  });
});
