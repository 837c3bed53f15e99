/**
 * Behaviour 36 (the conformance README, "fenced writes"): the store's own `Fence` takes the current
 * holder's writes and refuses a stale holder's with `StaleTokenError`, whether that holder stopped
 * renewing or was paused (SIGSTOP) past its lease with a write on its way.
 */
import { describe, expect } from 'vitest';
import type { SuiteContext } from './context.js';

export function defineFenceBehaviours(ctx: SuiteContext): void {
  const { options, T, freshKey, makeLocker, makeFence, spawnChild, itWhen, capabilities } = ctx;
  const noFence = () => (options.fence ? undefined : 'no fence for this store');

  describe('fenced writes in the store', () => {
    itWhen(
      noFence,
      '36a. a holder whose lease ran out is refused once a newer holder wrote; the newer value stands',
      async () => {
        const key = freshKey();
        const resource = `${key}/resource`;
        const fence = await makeFence();
        const stale = await (await makeLocker({ autoRenew: false })).lock(key);
        await fence.write(resource, stale.token, 'first');
        expect(await fence.read(resource)).toEqual({ value: 'first', token: stale.token });
        const current = await (await makeLocker()).lock(key, { timeoutMs: 3 * T + 5000 });
        expect(current.token).toBeGreaterThan(stale.token);
        await fence.write(resource, current.token, 'current');
        const refused: unknown = await fence.write(resource, stale.token, 'stale').then(
          () => 'accepted',
          (error: unknown) => error,
        );
        expect(refused).toMatchObject({ code: 'STALE_TOKEN', name: 'StaleTokenError', resource, token: stale.token });
        const highest = (refused as { highest?: bigint }).highest;
        if (highest !== undefined) expect(highest).toBe(current.token);
        expect(await fence.read(resource)).toEqual({ value: 'current', token: current.token });
        // The current holder writes as often as it likes; both write at once: only its writes land.
        await fence.write(resource, current.token, 'again');
        const racing = await Promise.allSettled(
          Array.from({ length: 10 }, (_, i) =>
            fence.write(resource, i % 2 ? current.token : stale.token, `${i % 2 ? 'current' : 'stale'} ${i}`),
          ),
        );
        racing.forEach((result, i) => {
          if (i % 2) expect(result.status, `current holder's write ${i}`).toBe('fulfilled');
          else expect(result, `stale holder's write ${i}`).toMatchObject({ status: 'rejected', reason: { code: 'STALE_TOKEN' } });
        });
        const last = await fence.read(resource);
        expect(last?.token).toBe(current.token);
        expect(last?.value).toMatch(/^(again|current \d)$/);
        expect(await fence.read(`${resource}/never written`)).toBeNull();
        await current.release();
      },
      60_000,
    );

    itWhen(
      () => noFence() ?? (capabilities.crossProcess ? undefined : 'in-process backend'),
      '36b. a holder paused (SIGSTOP) past its lease with a write on its way: the write is refused once a newer holder wrote',
      async () => {
        const key = freshKey();
        const resource = `${key}/resource`;
        const fence = await makeFence();
        const child = await spawnChild();
        const config = options.fence!;
        await child.rpc.call('openFence', config.module, config.export, config.options);
        const { token } = await child.lock(key);
        expect(await child.rpc.call('fenceWrite', resource, token, 'child')).toBe('ok');
        child.signal('SIGSTOP');
        const lock = await (await makeLocker()).lock(key, { timeoutMs: 3 * T + 5000 });
        expect(lock.token).toBeGreaterThan(token);
        await fence.write(resource, lock.token, 'new holder');
        // Sent while the child is stopped: the first thing it does when it runs again, as a write it
        // had decided on before the pause would be.
        const late = child.rpc.call('fenceWrite', resource, token, 'paused holder');
        child.signal('SIGCONT');
        expect(await late).toBe('STALE_TOKEN');
        expect(await fence.read(resource)).toEqual({ value: 'new holder', token: lock.token });
        await lock.release();
      },
      60_000,
    );

    itWhen(noFence, '36c. bad resources, tokens and values: InvalidArgumentError, nothing written', async () => {
      const fence = await makeFence();
      const resource = freshKey();
      const bad: [unknown, unknown, unknown][] = [
        [resource, -1n, 'v'],
        [resource, 10n ** 38n, 'v'],
        [resource, 5, 'v'],
        [resource, '5', 'v'],
        [resource, null, 'v'],
        [resource, 1n, 5],
        [resource, 1n, null],
        [resource, 1n, undefined],
        ['', 1n, 'v'],
        ['x\uD800', 1n, 'v'],
        ['x'.repeat(1025), 1n, 'v'],
        [42, 1n, 'v'],
      ];
      for (const [r, token, value] of bad) {
        await expect(
          fence.write(r as string, token as bigint, value as string),
          `write(${String(r).slice(0, 20)}, ${String(token)}, ${String(value)})`,
        ).rejects.toMatchObject({
          code: 'INVALID_ARGUMENT',
        });
      }
      await expect(fence.read('')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      expect(await fence.read(resource)).toBeNull();
    });
  });
}
