// How a lease is kept alive from this process, written once. The rule: count a lease from the send
// time of the call that last set its ttl (never from the answer: the store started counting when
// it got the call), less a drift allowance; renew a third of the ttl after that, so two more tries
// fit before it ends; after a failed try, try again within a sixth of the ttl and before half of
// what is left; once the estimate has run out, the lease is lost, whatever a late answer says.
//
// Two things keep leases by it. The lock handle (lock-handle.ts) keeps a held lock: its renewals
// share one queue of store calls with the caller's extend and release, and its estimate also
// remembers what failed calls may have set, so it applies the rule with these functions itself.
// `LeaseKeeper` keeps a lease that a wait holds before the caller has anything (a migration's
// first store while it waits for the second, an etcd waiter's lease, which its queued key dies
// with): nothing else calls the store for that lease meanwhile.
import { now, after, type Timer } from '../kit/time.js';

/** Drift allowance subtracted from every local lease estimate (as Redlock does: 1 % + 2 ms). */
export function safeLifetime(ttlMs: number): number {
  return ttlMs - Math.max(2, ttlMs * 0.01);
}

/** How long after a lease (re)started its next renewal is due: a third of its ttl, or `intervalMs` if sooner. */
export function renewalDueMs(ttlMs: number, intervalMs = Infinity): number {
  return Math.min(intervalMs, ttlMs / 3);
}

/** When to try again after a renewal failed with `leftMs` of the estimate left. */
export function renewalRetryMs(ttlMs: number, leftMs: number): number {
  return Math.max(5, Math.min(ttlMs / 6, leftMs / 2));
}

/**
 * Keeps one lease alive for a wait, by the rule above, one renewal at a time. `renew` makes one
 * renewal of `ttlMs` and says whether the store still holds the lease (it may throw: the keeper
 * tries again while the estimate lasts). `since`: when the lease's ttl last started. `wait`: the
 * signal of the wait it serves; `storeLost`: the lease's own loss report, if the store gives one.
 * Never throws; `signal` aborts when the wait does (with its reason) or the lease is lost: `renew`
 * answered false, the store reported it, or no renewal was confirmed before the estimate ran out
 * (with the last renewal error as the reason, if there was one).
 */
export class LeaseKeeper {
  /** How long a lease of `ttlMs` may be counted on from its (re)start here: its ttl less the drift allowance (`safeLifetime`). */
  static readonly safeLifetime = safeLifetime;
  /** Aborted when the wait is, or the lease is lost (not when the keeper is stopped). */
  readonly signal: AbortSignal;
  readonly #controller = new AbortController();
  readonly #renew: () => Promise<boolean>;
  readonly #ttlMs: number;
  readonly #wait: AbortSignal;
  readonly #storeLost: AbortSignal | undefined;
  readonly #onWait = () => this.#controller.abort(this.#wait.reason);
  readonly #onStoreLost = () => this.#lose(this.#storeLost?.reason ?? new Error('the store reported the lease lost'));
  #since: number;
  /**
   * One timer at a time, as the lock handle's: the next renewal while none is in flight, the end
   * of the estimate while one is (a renewal that never answers must not keep the lease).
   */
  #timer: Timer | undefined;
  #renewal: Promise<void> = Promise.resolve();
  #lastError: unknown;
  #lost = false;
  #stopped = false;

  constructor(renew: () => Promise<boolean>, ttlMs: number, since: number, wait: AbortSignal, storeLost?: AbortSignal) {
    this.#renew = renew;
    this.#ttlMs = ttlMs;
    this.#since = since;
    this.#wait = wait;
    this.#storeLost = storeLost;
    this.signal = this.#controller.signal;
    if (wait.aborted) this.#onWait();
    else wait.addEventListener('abort', this.#onWait, { once: true });
    if (storeLost?.aborted) this.#onStoreLost();
    else storeLost?.addEventListener('abort', this.#onStoreLost, { once: true });
    this.#schedule(this.#since + renewalDueMs(this.#ttlMs) - now());
  }

  /** The send time of the last confirmed renewal (or the `since` it was given): where the lease's ttl counts from. */
  get since(): number {
    return this.#since;
  }

  /** Whether the lease is lost, or no longer surely alive by the estimate. */
  get lost(): boolean {
    return this.#lost || now() >= this.#end();
  }

  /** Stops renewing; resolves once a renewal in flight has settled (one store call per lease at a time). */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#timer?.cancel();
    this.#wait.removeEventListener('abort', this.#onWait);
    this.#storeLost?.removeEventListener('abort', this.#onStoreLost);
    await this.#renewal;
  }

  /** Where the estimate runs out. */
  #end(): number {
    return this.#since + safeLifetime(this.#ttlMs);
  }

  #schedule(delayMs: number): void {
    if (this.#stopped || this.#lost) return;
    this.#timer = after(Math.max(0, delayMs), () => (this.#renewal = this.#renewOnce()), true);
  }

  async #renewOnce(): Promise<void> {
    if (this.#stopped || this.#lost) return;
    if (now() >= this.#end()) return this.#lose(this.#lastError ?? new Error('the lease was not renewed in time'));
    this.#timer = after(this.#end() - now(), () => this.#lose(this.#lastError ?? new Error('the lease was not renewed in time')), true);
    const sentAt = now();
    let ok: boolean;
    try {
      ok = await this.#renew();
    } catch (error) {
      this.#timer.cancel();
      this.#lastError = error;
      const left = this.#end() - now();
      if (left <= 0) return this.#lose(error);
      return this.#schedule(renewalRetryMs(this.#ttlMs, left));
    }
    this.#timer.cancel();
    if (!ok) return this.#lose(new Error('the store no longer holds the lease'));
    if (this.#stopped || this.#lost) return;
    this.#since = sentAt;
    this.#lastError = undefined;
    this.#schedule(this.#since + renewalDueMs(this.#ttlMs) - now());
  }

  #lose(reason: unknown): void {
    if (this.#stopped || this.#lost) return;
    this.#lost = true;
    this.#timer?.cancel();
    this.#controller.abort(reason);
  }
}
