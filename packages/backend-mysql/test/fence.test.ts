// The MySQL/MariaDB fence in the caller's own transactions (what behaviour 36 cannot show on every
// store): the guard orders concurrent transactions by token, and a stale one writes nothing.
import { StaleTokenError } from '@deadbolt/core';
import { matrixUrl } from '@deadbolt/conformance';
import { mysqlFence } from '@deadbolt/mysql';
import { createPool } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const url = matrixUrl('mysql');
const admin = createPool({ uri: url, connectionLimit: 4 });
const fence = mysqlFence({ url });
const resource = () => `mysql-fence-test/${Math.random().toString(36).slice(2)}`;

beforeAll(async () => {
  await admin.query('CREATE TABLE IF NOT EXISTS deadbolt_fence_test (id VARCHAR(100) PRIMARY KEY, status TEXT) ENGINE=InnoDB');
});

afterAll(async () => {
  await fence.close();
  await admin.query('DROP TABLE IF EXISTS deadbolt_fence_test');
  await admin.end();
});

/** A transaction of its own on one connection of `admin`. */
async function transaction() {
  const tx = await admin.getConnection();
  await tx.query('START TRANSACTION');
  return tx;
}
const status = async (id: string) => (await admin.query('SELECT status FROM deadbolt_fence_test WHERE id = ?', [id]))[0];

describe('mysql fence', () => {
  it('guard: a newer token waits for an older one in flight, then an older token is refused and its writes roll back', async () => {
    const r = resource();
    const older = await transaction();
    await fence.guard(older, r, 5n);
    await older.query('INSERT INTO deadbolt_fence_test VALUES (?, ?)', [r, 'older']);
    // The newer writer's guard waits on the resource's row until the older transaction ends.
    const newer = await transaction();
    let guarded = false;
    const newerGuard = fence.guard(newer, r, 6n).then(() => (guarded = true));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(guarded).toBe(false);
    await older.query('COMMIT');
    older.release();
    await newerGuard;
    await newer.query('UPDATE deadbolt_fence_test SET status = ? WHERE id = ?', ['newer', r]);
    await newer.query('COMMIT');
    newer.release();
    // The older holder comes back with another write: refused, and its transaction writes nothing.
    const late = await transaction();
    const refused = await fence.guard(late, r, 5n).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(StaleTokenError);
    expect(refused).toMatchObject({ code: 'STALE_TOKEN', resource: r, token: 5n, highest: 6n });
    await late.query('ROLLBACK');
    late.release();
    expect(await status(r)).toEqual([{ status: 'newer' }]);
    expect((await fence.read(r))?.token).toBe(6n);
  });

  it("transaction: commits what the function wrote; rolls back on a stale token (the function never runs) and on the function's own error", async () => {
    const r = resource();
    await fence.transaction(r, 7n, (tx) => tx.query('INSERT INTO deadbolt_fence_test VALUES (?, ?)', [r, 'seven']));
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
        await tx.query('UPDATE deadbolt_fence_test SET status = ? WHERE id = ?', ['eight', r]);
        throw mine;
      }),
    ).rejects.toBe(mine);
    expect(await status(r)).toEqual([{ status: 'seven' }]);
    // The rolled-back transaction's token did not count either.
    expect((await fence.read(r))?.token).toBe(7n);
  });

  it('refuses bad options before connecting, and fails typed when the server cannot be reached', async () => {
    expect(() => mysqlFence({ url: 'postgres://x' })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => mysqlFence({ url, table: 'bad-name' })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => mysqlFence({} as never)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    const away = mysqlFence({ url: 'mysql://root@127.0.0.1:1/test' });
    await expect(away.write(resource(), 1n, 'x')).rejects.toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
    await away.close();
  });
});
