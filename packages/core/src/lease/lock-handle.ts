// The lock handle: one held lease, its background renewal, its local estimate of how long it is
// surely held, loss detection and release (with lock-delay). The locker makes handles and keeps
// the list of those it holds (HeldHandles); a handle needs of its locker only its backend and
// `forget`, so this module does not import the locker. How often it renews and when it counts a
// lease as run out is the one rule of lease-keeper.ts.
import { diagnostics, eventKey, eventSource, type LeaseEvent } from '../api/diagnostics.js';
import { asDeadboltError, LockLostError, NotOwnerError } from '../api/errors.js';
import { renewalDueMs, renewalRetryMs, safeLifetime } from './lease-keeper.js';
import { now, after, answerWithin, nodeDelay, noop, type Timer } from '../kit/time.js';
import { validateTtl } from '../api/validate.js';
import { DONE } from '../kit/wait.js';
import type { Capabilities, Lease, LockBackend } from '../kit/backend.js';
import type { Lock } from '../api/types.js';

/** What a handle needs of the locker that made it. */
export interface HandleOwner {
  readonly backend: LockBackend;
  /** The handle is done (released or lost): drop it from the locker's list. */
  forget(handle: LockHandle): void;
}

/** What every handle of one locker shares. */
export interface HandleSettings {
  readonly renewIntervalMs: number | undefined;
  readonly autoRenew: boolean;
  readonly operationTimeoutMs: number;
  /** Events give keys hashed (LockerOptions.redactKeys). */
  readonly redactKeys: boolean;
  /** The backend's capabilities, every default filled in: `extend` checks its ttl against them. */
  readonly capabilities: Required<Capabilities>;
}

/** A hold's ttl (what this process counts on) and lock-delay (what the store keeps on top of it). */
export interface LeaseTerms {
  readonly ttlMs: number;
  readonly delayMs: number;
}

/**
 * The handles a locker holds (close() releases them), linked through the handles themselves:
 * adding and removing one is a few field writes, where a Set first hashes each new handle, a tenth
 * of an in-process lock cycle.
 */
export class HeldHandles {
  #head: LockHandle | undefined;

  add(handle: LockHandle): void {
    handle.heldNext = this.#head;
    if (this.#head) this.#head.heldPrev = handle;
    this.#head = handle;
  }

  /** Idempotent: a handle not in the list is left alone. */
  delete(handle: LockHandle): void {
    const { heldPrev: prev, heldNext: next } = handle;
    if (prev) prev.heldNext = next;
    else if (this.#head === handle) this.#head = next;
    else return;
    if (next) next.heldPrev = prev;
    handle.heldPrev = handle.heldNext = undefined;
  }

  *[Symbol.iterator](): Iterator<LockHandle> {
    // The next link is read before yielding: a caller may remove the handle it was given.
    for (let h = this.#head; h;) {
      const next: LockHandle | undefined = h.heldNext;
      yield h;
      h = next;
    }
  }
}

export class LockHandle implements Lock {
  readonly key: string;
  readonly owner: string;
  readonly token: bigint;
  readonly #locker: HandleOwner;
  readonly #lease: Lease;
  /**
   * Made when `signal` is first read (most holds never read it, and a controller costs more than
   * the rest of an in-process lock cycle); aborted with `#lostReason` then or on loss.
   */
  #controller: AbortController | undefined;
  #lostReason: LockLostError | undefined;
  readonly #settings: HandleSettings;
  #ttlMs: number;
  /** Lock-delay: every store call asks for the ttl plus this; the estimate counts on the ttl only. */
  readonly #delayMs: number;
  /** When the lease was found lost, and the store release that waits out the lock-delay after it. */
  #lostAt = 0;
  #delayedRelease: Timer | undefined;
  /**
   * The shortest ttl of any store call that failed or was abandoned: it may still land after a
   * later call, so no estimate may count on more than this from that later call's send.
   */
  #uncertainTtlMs = Infinity;
  #validUntil: number;
  /** Where the confirmed lease counts from (the grant's or the last confirmed renewal's send time). */
  #since: number;
  #state: 'held' | 'lost' | 'released' = 'held';
  #renewTimer: Timer | undefined;
  #expiryTimer: Timer | undefined;
  #lastRenewError: unknown;
  #released: Promise<void> | undefined;
  /** The store release under way or done (see `#releaseInStore`). */
  #storeReleased: Promise<void> | undefined;
  /**
   * The last of this lease's store calls (settled or not): each waits for the one before, so a
   * renewal and an extend or release never cross. Undefined before the first.
   */
  #busy: Promise<unknown> | undefined;
  /** Our listener on `lease.lost` (a backend may share that signal between many leases). */
  #onStoreLoss: (() => void) | undefined;

  /** Links in the locker's list of held handles (`HeldHandles`); not part of the `Lock` API. */
  heldPrev: LockHandle | undefined;
  heldNext: LockHandle | undefined;

  /** `since`: when the lease's ttl last started, if after `lease.acquiredAt` (a renewal before the grant was reported). */
  /** `token`: the grant's, unless the locker lifted it above the store's token floor (token-floor.ts). */
  constructor(
    locker: HandleOwner,
    lease: Lease,
    terms: LeaseTerms,
    settings: HandleSettings,
    at?: number,
    since = lease.acquiredAt,
    token = lease.token,
  ) {
    const { ttlMs } = terms;
    this.#locker = locker;
    this.#lease = lease;
    this.key = lease.key;
    this.owner = lease.owner;
    this.token = token;
    this.#ttlMs = ttlMs;
    this.#delayMs = terms.delayMs;
    this.#settings = settings;
    this.#validUntil = since + safeLifetime(ttlMs);
    this.#since = since;
    if (lease.lost?.aborted) {
      this.#lose(new LockLostError(this.key, 'the store reported the lease lost', { cause: lease.lost.reason }));
      return;
    }
    if (lease.lost) {
      const lost = lease.lost;
      this.#onStoreLoss = () =>
        this.#lose(new LockLostError(this.key, `the store reported lock ${JSON.stringify(this.key)} lost`, { cause: lost.reason }));
      lost.addEventListener('abort', this.#onStoreLoss, { once: true });
    }
    this.#schedule(at);
  }

  get signal(): AbortSignal {
    this.#checkExpiry();
    if (!this.#controller) {
      this.#controller = new AbortController();
      if (this.#lostReason) this.#controller.abort(this.#lostReason);
    }
    return this.#controller.signal;
  }

  get held(): boolean {
    this.#checkExpiry();
    return this.#state === 'held';
  }

  extend(ttlMs: number = this.#ttlMs): Promise<void> {
    if (!diagnostics.extend.hasSubscribers) return this.#extend(ttlMs);
    return diagnostics.extend.tracePromise(() => this.#extend(ttlMs), { ...this.#event(), ttlMs });
  }

  async #extend(ttlMs: number): Promise<void> {
    validateTtl(ttlMs, this.#settings.capabilities);
    if (this.#delayMs > 0) validateTtl(ttlMs + this.#delayMs, this.#settings.capabilities, 'ttlMs + lockDelayMs');
    this.#checkExpiry();
    this.#throwUnlessHeld('');
    const ok = await this.#refresh(ttlMs, 'renew');
    this.#throwUnlessHeld(' during extend');
    if (!ok) {
      this.#lose(new LockLostError(this.key, `lock ${JSON.stringify(this.key)} is no longer held by this owner`));
      throw this.#lostReason;
    }
    this.#schedule();
  }

  release(): Promise<void> {
    this.#released ??= diagnostics.release.hasSubscribers
      ? diagnostics.release.tracePromise(() => this.#release(), { ...this.#event(), heldMs: now() - this.#lease.acquiredAt })
      : this.#release();
    return this.#released;
  }

  /**
   * Stops tending the lease and leaves it to the store to expire at its ttl: no renewal, no
   * release, and the locker's close() leaves it alone. For a claim meant to outlive this process
   * on a ttl store (a job's run marker, election.ts); not part of the `Lock` API.
   */
  abandon(): void {
    if (this.#state !== 'held') return;
    this.#state = 'released';
    this.#released = this.#storeReleased = DONE;
    this.#stopTimers();
    this.#locker.forget(this);
  }

  /** What every event about this lease says (diagnostics.ts). */
  #event(): LeaseEvent {
    return { key: eventKey(this.key, this.#settings.redactKeys), ...eventSource(this.#locker.backend), token: this.token };
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  #throwUnlessHeld(when: string): void {
    if (this.#state === 'lost') throw this.#lostReason;
    if (this.#state === 'released') throw new NotOwnerError(`lock ${JSON.stringify(this.key)} was released${when || ' already'}`);
  }

  #release(): Promise<void> {
    if (this.#state === 'held') this.#state = 'released';
    this.#stopTimers();
    this.#locker.forget(this);
    // After a loss with lock-delay, writes may still be in flight: the key is not freed early.
    if (this.#state === 'lost' && this.#delayMs > 0) {
      this.#releaseAfterDelay();
      return Promise.resolve();
    }
    // Also after a loss: the release is owner-checked and clears anything we may still own. It
    // waits for a renewal in flight, so that renewal cannot land after it and revive the claim.
    return this.#releaseInStore();
  }

  /**
   * A lost lease with lock-delay is given back only once the delay since the loss has passed (a
   * ttl store expires it then by itself; a session store needs the release). Not awaited by
   * anyone: if the process ends first, the store's own expiry does it.
   */
  #releaseAfterDelay(): void {
    if (this.#delayedRelease) return;
    this.#delayedRelease = after(Math.max(0, this.#lostAt + this.#delayMs - now()), () => void this.#releaseInStore().catch(noop), true);
  }

  /**
   * Gives the lease back in the store once; only a failed attempt is tried again by a later call.
   * A store in this process does it on the spot for a lease that has made no store call yet;
   * otherwise it goes behind the last call (`#busy`), so two never cross.
   */
  #releaseInStore(): Promise<void> {
    if (this.#storeReleased) return this.#storeReleased;
    const backend = this.#locker.backend;
    if (backend.releaseNow && !this.#busy) {
      try {
        backend.releaseNow(this.#lease);
      } catch (error) {
        return Promise.reject(asDeadboltError(error, backend, 'release'));
      }
      return (this.#storeReleased = DONE);
    }
    this.#storeReleased = this.#storeCall(
      'release',
      () => backend.release(this.#lease),
      () => (this.#storeReleased = undefined),
    );
    return this.#storeReleased;
  }

  /**
   * Runs one store call for this lease after the previous one settled, bounded by the operation
   * timeout; failures come back as typed errors, after `onFailure` ran.
   */
  #storeCall<T>(operation: string, call: () => Promise<T>, onFailure?: () => void): Promise<T> {
    const backend = this.#locker.backend;
    const ms = this.#settings.operationTimeoutMs;
    const go = () => {
      let sent: Promise<T>;
      try {
        sent = call();
      } catch (error) {
        sent = Promise.reject(error);
      }
      return answerWithin(sent, ms, backend, operation).catch((error: unknown) => {
        onFailure?.();
        throw asDeadboltError(error, backend, operation);
      });
    };
    // The first call goes out at once (the common hold: grant, then release).
    const run = this.#busy ? this.#busy.then(go, go) : go();
    this.#busy = run;
    return run;
  }

  /**
   * Renews the lease (after any call in flight) to `ttlMs`, or to the lease's ttl as it is when the
   * call is sent. When the store confirms, and before the next call may start, the estimate counts
   * from this call's send time with the ttl that reached the store, which later renewals then use.
   * A failed call may still have landed with its ttl: remember it.
   */
  async #refresh(ttlMs: number | undefined, operation: string): Promise<boolean> {
    let sentAt = 0;
    let sent = 0;
    try {
      return await this.#storeCall(operation, async () => {
        sentAt = now();
        sent = ttlMs ?? this.#ttlMs;
        const ok = await this.#locker.backend.renew(this.#lease, sent + this.#delayMs);
        if (ok && this.#state === 'held') {
          this.#validUntil = sentAt + safeLifetime(Math.min(sent, this.#uncertainTtlMs));
          this.#since = sentAt;
          this.#ttlMs = sent;
        }
        return ok;
      });
    } catch (error) {
      if (sent && this.#state === 'held') {
        this.#uncertainTtlMs = Math.min(this.#uncertainTtlMs, sent);
        const validUntil = sentAt + safeLifetime(sent);
        // The estimate may only shrink here; the timer that declares it run out must follow.
        if (validUntil < this.#validUntil) {
          this.#validUntil = validUntil;
          this.#armExpiry();
        }
      }
      throw error;
    }
  }

  /**
   * One timer at a time: with auto-renew, the next renewal (the expiry timer is armed only while a
   * renewal is in flight); without it, the expiry of the local estimate.
   */
  #schedule(at?: number): void {
    this.#stopTimers();
    if (!this.#settings.autoRenew) return this.#armExpiry();
    const interval = renewalDueMs(this.#ttlMs, this.#settings.renewIntervalMs);
    // An interval after the lease's start, not after now: a grant that arrives late (a slow store,
    // a second store in a migration) may already be a third through its ttl, and is renewed at once.
    at ??= now();
    this.#scheduleRenew(Math.max(0, Math.min(this.#since + interval, this.#validUntil - 1) - at), at);
  }

  #armExpiry(): void {
    this.#expiryTimer?.cancel();
    // after() never fires before its deadline on the monotonic clock, so the estimate has run out.
    this.#expiryTimer = after(Math.max(0, this.#validUntil - now()), () => this.#checkExpiry(), true);
  }

  #scheduleRenew(delayMs: number, at?: number): void {
    this.#renewTimer?.cancel();
    // Rounded down to one of 32 steps per doubling (at most 3 % early): `after` shares one Node
    // timer among the timers of one whole-millisecond delay, and a delay counted from the grant
    // varies with each grant's round trip, so on a loaded machine nearly every lock of a busy loop
    // made a delay, and a Node timer, of its own.
    this.#renewTimer = after(nodeDelay(delayMs), () => void this.#renew(), true, at);
  }

  async #renew(): Promise<void> {
    this.#checkExpiry();
    if (this.#state !== 'held') return;
    this.#armExpiry();
    let ok: boolean;
    try {
      ok = await this.#refresh(undefined, 'renew');
    } catch (error) {
      if (this.#state !== 'held') return;
      // Keep trying while the lease may still be ours; the armed expiry timer declares it lost.
      this.#lastRenewError = error;
      const left = this.#validUntil - now();
      if (diagnostics.renewalFailed.hasSubscribers)
        diagnostics.renewalFailed.publish({ ...this.#event(), error, leftMs: Math.max(0, left) });
      this.#scheduleRenew(renewalRetryMs(this.#ttlMs, left));
      return;
    }
    if (this.#state !== 'held') return;
    if (!ok) {
      this.#lose(new LockLostError(this.key, `lock ${JSON.stringify(this.key)} was lost: the store no longer holds it for this owner`));
      return;
    }
    this.#lastRenewError = undefined;
    this.#schedule();
  }

  #checkExpiry(): void {
    if (this.#state !== 'held' || now() < this.#validUntil) return;
    const cause = this.#lastRenewError;
    this.#lose(
      new LockLostError(
        this.key,
        `lock ${JSON.stringify(this.key)} may have expired: its lease was not renewed in time`,
        cause === undefined ? undefined : { cause },
      ),
    );
    // A store whose lease is a session (ZooKeeper) keeps the claim as long as the client lives, so
    // hand it back now that we no longer count on it (after the lock-delay, if there is one).
    // Owner-checked, so harmless on ttl stores; a failure changes nothing for the caller, who has
    // already been told the lock is lost.
    if (this.#delayMs > 0) this.#releaseAfterDelay();
    else this.#releaseInStore().catch(noop);
  }

  #lose(error: LockLostError): void {
    if (this.#state !== 'held') return;
    this.#state = 'lost';
    this.#lostAt = now();
    this.#stopTimers();
    this.#locker.forget(this);
    this.#lostReason = error;
    this.#controller?.abort(error);
    if (diagnostics.leaseLost.hasSubscribers)
      diagnostics.leaseLost.publish({ ...this.#event(), reason: error, heldMs: this.#lostAt - this.#lease.acquiredAt });
  }

  #stopTimers(): void {
    if (this.#state !== 'held' && this.#onStoreLoss) {
      this.#lease.lost?.removeEventListener('abort', this.#onStoreLoss);
      this.#onStoreLoss = undefined;
    }
    this.#renewTimer?.cancel();
    this.#expiryTimer?.cancel();
    this.#renewTimer = this.#expiryTimer = undefined;
  }
}
