/**
 * Behaviour 36 (the conformance README, "fenced writes"): the store's own `Fence` takes the current
 * holder's writes and refuses a stale holder's with `StaleTokenError`, whether that holder stopped
 * renewing or was paused (SIGSTOP) past its lease with a write on its way; a resource at its first
 * version, a crowd of writers and every kind of string keep that promise too.
 */
import type { SuiteContext } from './context.js';

export function defineFenceBehaviours(ctx: SuiteContext): void {
  const { describe, expect } = ctx.runner;
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

    itWhen(
      noFence,
      '36d. a freshly made resource: a lower and a higher token racing after its first write never leave the lower one standing',
      async () => {
        const fence = await makeFence();
        const key = freshKey();
        const landed: string[] = [];
        // Twenty fresh resources, each written once (its first version), then a higher and a lower
        // token at once, in both orders.
        for (let i = 0; i < 20; i++) {
          const resource = `${key}/r${i}`;
          await fence.write(resource, 10n, 'first');
          const [high, low] = [fence.write(resource, 12n, 'twelve'), fence.write(resource, 11n, 'eleven')];
          const racing = i % 2 ? [low, high] : [high, low];
          await Promise.allSettled(racing);
          await expect(high, `resource ${i}: the higher token's write`).resolves.toBeUndefined();
          await low.catch((error: unknown) =>
            expect(error, `resource ${i}: the lower token's write`).toMatchObject({ code: 'STALE_TOKEN' }),
          );
          const read = await fence.read(resource);
          if (read?.token !== 12n) landed.push(`resource ${i}: ${String(read?.token)} ${read?.value}`);
          // And once it stands, a lower one is refused.
          await expect(fence.write(resource, 11n, 'late')).rejects.toMatchObject({ code: 'STALE_TOKEN' });
        }
        expect(landed, 'a lower token written over a higher one').toEqual([]);
      },
      60_000,
    );

    itWhen(
      noFence,
      "36e. contention: 150 writes at once with the holder's one token, then 150 with rising tokens in any order, each resolves or (lower) is refused, never a store error",
      async () => {
        const fence = await makeFence();
        const resource = `${freshKey()}/resource`;
        // Written twice first: a resource past its first version (where a store keeps versions).
        await fence.write(resource, 7n, 'first');
        await fence.write(resource, 7n, 'second');
        const same = await Promise.allSettled(Array.from({ length: 150 }, (_, i) => fence.write(resource, 7n, `same ${i}`)));
        const failed = same.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => String(r.reason));
        expect(failed, "writes with the holder's token that failed").toEqual([]);
        expect((await fence.read(resource))?.token).toBe(7n);
        // Rising tokens arriving in any order: each is accepted, or refused as stale because a
        // higher one landed first; the highest always stands.
        const tokens = Array.from({ length: 150 }, (_, i) => 8n + BigInt((i * 61) % 150));
        const rising = await Promise.allSettled(tokens.map((t) => fence.write(resource, t, `rising ${t}`)));
        const odd = rising.filter(
          (r): r is PromiseRejectedResult => r.status === 'rejected' && (r.reason as { code?: string }).code !== 'STALE_TOKEN',
        );
        expect(
          odd.map((r) => String(r.reason)),
          'rising writes that failed otherwise than STALE_TOKEN',
        ).toEqual([]);
        expect(await fence.read(resource)).toEqual({ token: 157n, value: 'rising 157' });
      },
      60_000,
    );

    itWhen(
      noFence,
      '36f. values: every string a fence accepts reads back exactly; what no store can keep (a lone surrogate, U+0000) is InvalidArgumentError before any I/O',
      async () => {
        const fence = await makeFence();
        const key = freshKey();
        const values = [
          '',
          'plain',
          ' spaced ',
          'émoji 🦀 and 𝄞',
          'quotes \' " ` and ; -- %s $1 ? :x',
          'lines\r\n\ttabs',
          '\u007f\u0001\u001f',
          '\uFFFD\uFEFF\u200B',
          'x'.repeat(64 * 1024),
          'a\u0000b',
          '\u0000',
          'x\uD800',
          '\uDC00y',
          '\uDBFF\uDBFF',
        ];
        let i = 0;
        for (const value of values) {
          const resource = `${key}/v${i++}`;
          const keepable = value.isWellFormed() && !value.includes('\u0000');
          if (keepable) {
            await fence.write(resource, 1n, value);
            const read = await fence.read(resource);
            expect(
              read?.value === value,
              `value ${JSON.stringify(value.slice(0, 40))} read back as ${JSON.stringify(read?.value?.slice(0, 40))}`,
            ).toBe(true);
          } else {
            await expect(fence.write(resource, 1n, value), `value ${JSON.stringify(value)}`).rejects.toMatchObject({
              code: 'INVALID_ARGUMENT',
            });
            expect(await fence.read(resource), `value ${JSON.stringify(value)} was written`).toBeNull();
          }
        }
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
      for (const options of [null, 5, 'x', { timeoutMs: -1 }, { timeoutMs: 0 }, { timeoutMs: Infinity }, { signal: 'x' }]) {
        await expect(fence.write(resource, 1n, 'v', options as never), `options ${JSON.stringify(options)}`).rejects.toMatchObject({
          code: 'INVALID_ARGUMENT',
        });
      }
      const aborted = AbortSignal.abort(new Error('stop'));
      await expect(fence.write(resource, 1n, 'v', { signal: aborted })).rejects.toThrow('stop');
      await expect(fence.read('')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      expect(await fence.read(resource)).toBeNull();
    });
  });
}
