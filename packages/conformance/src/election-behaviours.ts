/**
 * Behaviours 38–39 (the conformance README, "leader election and once-per-fleet jobs"): one leader
 * at a time whose terms' tokens rise, a resignation that hands over at once, a leader that stops
 * renewing (or whose process is paused) told of its loss and fenced out, observers that see terms in order or say how many they
 * missed; a job run once per window, skipped while it runs and for the rest of its window, run
 * again after it, and a job whose claim is lost told so.
 */
import type { Leader, LeaderChange } from '@deadbolt/core';
import { sleep } from '@deadbolt/core/backend';
import type { SuiteContext } from './context.js';
import { stallsFromNow } from './helpers.js';

/**
 * How soon a candidate in line must be elected after the leader resigns: well inside the leader's
 * ttl (10 s here), so only the resignation can have let it in; generous, as the new leader's
 * election includes its publication (two fence calls) on a loaded store.
 */
const HANDOVER_MS = 5000;

export function defineElectionBehaviours(ctx: SuiteContext): void {
  const { describe, it, expect } = ctx.runner;
  const { options, T, renewMs, freshKey, makeLocker, makeFence, spawnChild, itWhen, roundTtl, capabilities } = ctx;
  const noFence = () => (options.fence ? undefined : 'no fence for this store');
  const record = (name: string) => `${name}#deadbolt-leader`;

  /** The leader as `leader()` must show it: its value, term and (where the store shows holders' tokens) token. */
  function expectLeader(seen: Leader | null, value: string, term: number, token: bigint): void {
    expect(seen?.value).toBe(value);
    expect(seen?.term).toBe(term);
    // A migration's dual phase shows no holder's token (behaviour 37).
    if (!ctx.dualMigration) expect(seen?.token).toBe(token);
    expect(seen?.sinceMs).toBeGreaterThanOrEqual(0);
  }

  /**
   * A leader in a child process (to be paused or killed) with its value published in the store's
   * fence, a candidate here with the same fence, and the fence to check writes with.
   */
  async function childLeader(value: string) {
    const name = freshKey('election');
    const fence = await makeFence();
    const child = await spawnChild();
    const config = options.fence!;
    await child.rpc.call('openFence', config.module, config.export, config.options);
    const old = (await child.rpc.call('elect', name, value)) as { id: number; token: bigint; term: number };
    expect(old.term).toBe(1);
    return { name, fence, child, old, next: await makeLocker({ fence }) };
  }
  const crossProcess = () => noFence() ?? (capabilities.crossProcess ? undefined : 'in-process backend');

  describe('leader election', () => {
    itWhen(
      noFence,
      '38a. one leader at a time; a resignation elects the next candidate at once, with a higher token; the old term is fenced out',
      async () => {
        const name = freshKey('election');
        const fence = await makeFence();
        const [a, b, watcher] = [await makeLocker({ fence }), await makeLocker({ fence }), await makeLocker({ fence })];
        expect(await watcher.leader(name)).toBeNull();
        const first = await a.elect(name, { value: 'a', ttlMs: roundTtl(Math.max(10_000, T)) });
        expect(first.term).toBe(1);
        expect(first.held).toBe(true);
        expectLeader(await watcher.leader(name), 'a', 1, first.token);
        expect(await b.tryElect(name, { value: 'b' }), 'a second leader while the first leads').toBeNull();
        await expect(a.elect(name, { value: 'again', timeoutMs: 0 })).rejects.toMatchObject({ code: 'SELF_DEADLOCK' });
        const campaign = b.elect(name, { value: 'b', timeoutMs: 30_000 });
        await sleep(200);
        const stalls = stallsFromNow();
        const resignedAt = performance.now();
        await first.resign();
        await first.resign(); // idempotent
        const second = await campaign;
        expect(performance.now() - resignedAt, 'ms from a resignation to the next election').toBeLessThan(HANDOVER_MS + stalls());
        expect(second.token).toBeGreaterThan(first.token);
        expect(second.term).toBe(2);
        expect(first.held).toBe(false);
        await expect(first.proclaim('late')).rejects.toMatchObject({ code: 'NOT_OWNER' });
        // What the old term's value would meet if written straight to the fence: refused.
        await expect(fence.write(record(name), first.token, 'stale')).rejects.toMatchObject({ code: 'STALE_TOKEN' });
        await second.proclaim('b2');
        expectLeader(await watcher.leader(name), 'b2', 2, second.token);
        await second.resign();
        expect(await watcher.leader(name)).toBeNull();
      },
      60_000,
    );

    itWhen(
      noFence,
      '38b. a leader that stops renewing is told of its loss; a waiting candidate is elected after its lease, and the old leader cannot publish',
      async () => {
        const name = freshKey('election');
        const fence = await makeFence();
        const stale = await (await makeLocker({ fence, autoRenew: false })).elect(name, { value: 'stale' });
        const next = await makeLocker({ fence });
        const elected = await next.elect(name, { value: 'next', timeoutMs: 3 * T + 5000 });
        expect(stale.signal.aborted, 'the old leader knows its term ended').toBe(true);
        expect(stale.held).toBe(false);
        expect(elected.token).toBeGreaterThan(stale.token);
        expect(elected.term).toBe(2);
        await expect(stale.proclaim('still me')).rejects.toMatchObject({ code: 'LOCK_LOST' });
        await expect(fence.write(record(name), stale.token, 'still me')).rejects.toMatchObject({ code: 'STALE_TOKEN' });
        expectLeader(await next.leader(name), 'next', 2, elected.token);
        await elected.resign();
      },
      60_000,
    );

    itWhen(
      crossProcess,
      '38d. a leader process paused (SIGSTOP) past its lease: the next candidate is elected with a higher token; resumed, the old leader is told before it publishes',
      async () => {
        const { name, child, old, next } = await childLeader('paused');
        child.signal('SIGSTOP');
        const elected = await next.elect(name, { value: 'next', timeoutMs: 3 * T + 5000 });
        expect(elected.token).toBeGreaterThan(old.token);
        expect(elected.term).toBe(2);
        // Sent while the child is stopped: the first thing it does when it runs again, as a
        // publication it had decided on before the pause would be.
        const late = child.rpc.call('proclaim', old.id, 'still me');
        child.signal('SIGCONT');
        expect(await late).toBe('LOCK_LOST');
        await child.waitFor('lost', 2 * T + 2000);
        expectLeader(await next.leader(name), 'next', 2, elected.token);
        await elected.resign();
      },
      60_000,
    );

    itWhen(
      crossProcess,
      '38e. a leader process killed (SIGKILL): the candidate in line is elected within the lease plus one renewal interval, with a higher token',
      async () => {
        const { name, fence, child, old, next } = await childLeader('killed');
        const campaign = next.elect(name, { value: 'next', timeoutMs: 3 * T + 5000 });
        // In line before the kill, as a fleet's standby is.
        await sleep(300);
        const stalls = stallsFromNow();
        const killedAt = performance.now();
        await child.kill();
        const elected = await campaign;
        // The dead leader renewed at most one interval before the kill, so its lease lasts at most
        // a ttl plus that; a session store may end it at once. The second adds the new term's
        // publication (two fence calls) on a loaded store.
        expect(performance.now() - killedAt, 'ms from the kill to the next election').toBeLessThanOrEqual(T + renewMs + 2000 + stalls());
        expect(elected.token).toBeGreaterThan(old.token);
        expect(elected.term).toBe(2);
        await expect(fence.write(record(name), old.token, 'dead')).rejects.toMatchObject({ code: 'STALE_TOKEN' });
        expectLeader(await next.leader(name), 'next', 2, elected.token);
        await elected.resign();
      },
      60_000,
    );

    itWhen(
      noFence,
      '38c. an observer sees each term in order, from "no leader" on, and counts the terms too short to see',
      async () => {
        const name = freshKey('election');
        const fence = await makeFence();
        const [candidate, observer] = [await makeLocker({ fence }), await makeLocker({ fence })];
        const stop = new AbortController();
        const seen: LeaderChange[] = [];
        const watching = (async () => {
          for await (const change of observer.observe(name, { signal: stop.signal, intervalMs: 25 })) seen.push(change);
        })();
        // The first term starts once the observer has read "nobody": a first read slower than a
        // fixed pause (a loaded machine) saw the first term begun but not yet published.
        const until = performance.now() + 10_000;
        while (seen.length === 0 && performance.now() < until) await sleep(10);
        const TERMS = 5;
        for (let i = 1; i <= TERMS; i++) {
          const term = await candidate.elect(name, { value: `term ${i}` });
          expect(term.term).toBe(i);
          // The last term stands long enough to be seen; the others may pass unseen.
          if (i === TERMS) await sleep(300);
          else await term.resign();
        }
        stop.abort();
        await watching;
        expect(seen[0], 'the first change is the leader then: nobody').toEqual({ leader: null, missedTerms: 0 });
        const terms = seen.filter((c) => c.leader?.term != null);
        const numbers = [...new Set(terms.map((c) => c.leader!.term!))];
        expect(numbers, 'terms in order').toEqual([...numbers].sort((x, y) => x - y));
        expect(numbers.at(-1)).toBe(TERMS);
        expect(terms.at(-1)!.leader!.value).toBe(`term ${TERMS}`);
        // Every term was seen or counted as missed, none twice.
        const missed = seen.reduce((sum, c) => sum + c.missedTerms, 0);
        expect(numbers.length + missed, `terms seen (${numbers.join(', ')}) and missed (${missed})`).toBe(TERMS);
      },
      60_000,
    );
  });

  describe('once-per-fleet jobs', () => {
    it('39a. runOnce: one run among callers at once, skipped while it runs and for the rest of its window, run again after it', async () => {
      const name = freshKey('job');
      const [a, b, c] = [await makeLocker(), await makeLocker(), await makeLocker()];
      const atLeastMs = roundTtl(1500);
      const opts = { lockAtMostForMs: Math.max(roundTtl(T), atLeastMs), lockAtLeastForMs: atLeastMs };
      let runs = 0;
      const job = async ({ token, signal }: { token: bigint; signal: AbortSignal }) => {
        runs++;
        expect(signal.aborted).toBe(false);
        await sleep(300);
        return token;
      };
      const started = performance.now();
      const both = await Promise.all([a.runOnce(name, job, opts), b.runOnce(name, job, opts)]);
      const ran = both.filter((r) => r.ran);
      expect(ran, 'exactly one of two callers at once ran the job').toHaveLength(1);
      expect(both.find((r) => !r.ran)).toEqual({ ran: false, reason: 'busy' });
      expect(ran[0]).toMatchObject({ result: (ran[0] as { token: bigint }).token });
      expect(await c.runOnce(name, job, opts), 'inside the window').toEqual({ ran: false, reason: 'ran-recently' });
      // A job that throws marks its window too, and its error comes back.
      const failing = freshKey('job');
      await expect(a.runOnce(failing, () => Promise.reject(new Error('job failed')), opts)).rejects.toThrow('job failed');
      expect(await b.runOnce(failing, job, opts)).toEqual({ ran: false, reason: 'ran-recently' });
      // After the window (the store's ttl unit and shortest ttl may lengthen it), the next call runs.
      const windowMs = Math.max(atLeastMs, capabilities.minTtlMs) + capabilities.ttlGranularityMs;
      let again = await c.runOnce(name, job, opts);
      while (!again.ran && performance.now() - started < windowMs + 10_000) {
        expect(again).toEqual({ ran: false, reason: 'ran-recently' });
        await sleep(100);
        again = await c.runOnce(name, job, opts);
      }
      expect(again.ran, 'the job runs again once its window is over').toBe(true);
      expect(performance.now() - started, 'ms before the job ran again').toBeGreaterThanOrEqual(atLeastMs - 50);
      expect((again as { token: bigint }).token).toBeGreaterThan((ran[0] as { token: bigint }).token);
      expect(runs).toBe(2);
    }, 60_000);

    it('39b. runOnce: a job whose claim is lost is told (its signal aborts) and is not reported done; another runner runs it after lockAtMostForMs', async () => {
      const name = freshKey('job');
      const stale = await makeLocker({ autoRenew: false });
      const other = await makeLocker();
      const lockAtMostForMs = roundTtl(T);
      const stalls = stallsFromNow();
      let aborted = false;
      const run = stale.runOnce(
        name,
        async ({ signal }) => {
          await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
          aborted = true;
          return 'done';
        },
        { lockAtMostForMs },
      );
      await expect(run).rejects.toMatchObject({ code: 'LOCK_LOST' });
      expect(aborted).toBe(true);
      // The claim's lease is over in the store by now, or soon (its estimate ends before it).
      const deadline = performance.now() + 3 * T + 5000 + stalls();
      let taken = await other.runOnce(name, () => 'ran', { lockAtMostForMs });
      while (!taken.ran && performance.now() < deadline) {
        await sleep(100);
        taken = await other.runOnce(name, () => 'ran', { lockAtMostForMs });
      }
      expect(taken).toMatchObject({ ran: true, result: 'ran' });
    }, 60_000);
  });
}
