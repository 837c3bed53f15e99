// How a backend waits, in one file: wake-ups by key, the cadence rule, the poll loop, the wait on
// pooled connections, the unavailable grace and the calls in flight with their cleanups. Long
// because each is small and the backends import them together.
import type { Lease } from './backend.js';
import { BackendUnavailableError, LockerClosedError } from '../api/errors.js';
import { ownProps } from './options.js';
import { after, now, noop, settleWithin } from './time.js';

/**
 * In-process wake-ups by key: a backend calls `notify(key)` when it learns a key was released
 * (its own release, or a store notification) and waiters polling that key re-check at once.
 * `notify(key, owner)` addresses the one waiter whose turn it is (a FIFO queue's head).
 */
export class ReleaseNotifier {
  readonly #listeners = new Map<string, Set<(owner?: string, all?: boolean) => void>>();

  /**
   * Calls `listener` on the next releases of `key` (with the owner a release addresses, if any)
   * and on `notifyAll` (with `all` true) until the returned function is called.
   */
  subscribe(key: string, listener: (owner?: string, all?: boolean) => void): () => void {
    let set = this.#listeners.get(key);
    if (!set) this.#listeners.set(key, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.#listeners.get(key) === set) this.#listeners.delete(key);
    };
  }

  /** Calls the listeners of `key` (with the owner the release addresses, if any). Never throws. */
  notify(key: string, owner?: string): void {
    const set = this.#listeners.get(key);
    if (set) for (const listener of [...set]) listener(owner);
  }

  /**
   * Wakes every waiter of every key (after a notification channel was down, its messages lost),
   * whatever its own count of releases says: that count missed the lost ones.
   */
  notifyAll(): void {
    for (const set of [...this.#listeners.values()]) for (const listener of [...set]) listener(undefined, true);
  }

  /** Whether some waiter listens for `key` now. */
  listens(key: string): boolean {
    return this.#listeners.has(key);
  }

  /** Number of keys with listeners (for leak checks). */
  get size(): number {
    return this.#listeners.size;
  }
}

/** The least time a waiter's place in a store's queue lasts past its last refresh. */
export const MIN_WAITER_PLACE_MS = 1000;

/**
 * The one cadence rule for a waiter that keeps a place in the store (a queue entry, a claim row)
 * and polls: its place lasts `placeMs` past each refresh, its ttl (at least MIN_WAITER_PLACE_MS, so
 * a round trip or two always fits), and the head of the queue re-checks (and so refreshes) every
 * `pollMs`, the backend's poll delay but never more than a quarter of the ttl. A waiter behind the
 * head, which a release cannot grant (it names the head), only keeps its place: every `behindMs`,
 * a third of `placeMs`, so a thousand waiters cost the store a few refreshes a second rather than
 * a thousand polls. So a waiter that dies blocks the key for about one ttl after its last refresh,
 * however long the backend's poll delay, and a head notices a dead holder within a quarter of its
 * ttl once it knows it is the head (a third of a ttl at most after the waiter ahead was granted).
 */
export function waiterCadence(
  ttlMs: number,
  maxPollDelayMs: number,
): { readonly placeMs: number; readonly pollMs: number; readonly behindMs: number } {
  const placeMs = Math.max(ttlMs, MIN_WAITER_PLACE_MS);
  const pollMs = Math.max(1, Math.min(maxPollDelayMs, Math.floor(ttlMs / 4)));
  return { placeMs, pollMs, behindMs: Math.max(pollMs, Math.floor(placeMs / 3)) };
}

/** How a polling waiter backs off between attempts. */
export interface PollOptions {
  /** First delay; later delays grow ×2 up to `maxDelayMs`. Default 5 ms. */
  minDelayMs?: number;
  /** Default 250 ms. */
  maxDelayMs?: number;
  /** Wakes the waiter early when the key is released. */
  notifier?: ReleaseNotifier;
  /**
   * This waiter's owner id: a notification addressed to it always wakes it; one addressed to
   * another owner wakes it only through `wakes`.
   */
  owner?: string;
  /**
   * The pause after an attempt that was not granted, when the store told the backend how long
   * waiting is worth (a queue position, say); `undefined` falls back to the backoff. Jittered
   * like the backoff.
   */
  nextDelayMs?: () => number | undefined;
  /**
   * Whether a release notification not addressed to this waiter (to nobody in particular, or to
   * the owner `target`) wakes it now; it is called once per such notification, so it can count them. A
   * waiter far back in a queue cannot be granted by the next release: left asleep, it spares the
   * store a read per release (with hundreds of waiters in one process, a herd of them per handoff).
   * Default: a notification to nobody in particular wakes it, one to another owner does not.
   * `ReleaseNotifier.notifyAll` wakes it without asking.
   */
  wakes?: (target?: string) => boolean;
  /**
   * How long attempts may keep failing with `BackendUnavailableError` before the wait gives up.
   * A connection reset in the middle of a wait costs one failed attempt and the wait carries on;
   * a store that stays unreachable fails the wait after this long. Default 1 000 ms.
   */
  unavailableGraceMs?: number;
}

/**
 * A polling waiter's distance from the front of a store's queue, look by look. A waiter that moved
 * up since its last look looks again soon (the queue is moving: `'soon'` starts the backoff
 * over); one that did not backs off, so a long hold costs only a few looks per second.
 */
export class QueuePlace {
  #ahead = Number.POSITIVE_INFINITY;

  /** Note `ahead` claims in front of ours at this look: `'soon'` if fewer than at the last one, else `null` (the first look counts as moving). */
  look(ahead: number): 'soon' | null {
    const moved = ahead < this.#ahead;
    this.#ahead = ahead;
    return moved ? 'soon' : null;
  }
}

/** Already settled, one for all: what a call that has nothing to wait for (an in-process release) answers. */
export const DONE: Promise<void> = Promise.resolve();

/**
 * The shared wait loop for backends that can only poll: calls `attempt` until it yields a lease,
 * sleeping a jittered, growing delay in between, cut short by a release notification for `key`. Rejects with `signal.reason` when `signal` aborts
 * (after the attempt in flight settles, so a lease won by that attempt is released through
 * `onAbandon` rather than leaked). An attempt that fails as unavailable (`BackendUnavailableError`)
 * is retried until attempts have failed for `unavailableGraceMs` in a row (a reset costs one
 * attempt; a store that stays unreachable fails the wait); other attempt errors propagate.
 * An attempt returns the lease, `null` (not yet), or `'soon'`: not yet, but things moved (the
 * waiter advanced in a queue), so the backoff starts again from `minDelayMs`.
 */
export async function pollForLease<L extends Lease>(
  key: string,
  signal: AbortSignal,
  attempt: () => Promise<L | null | 'soon'>,
  onAbandon: (lease: L) => Promise<void>,
  given?: PollOptions,
): Promise<L> {
  const options = ownProps(given);
  const min = options.minDelayMs ?? 5;
  const max = options.maxDelayMs ?? 250;
  const grace = new UnavailableGrace(options.unavailableGraceMs);
  let delay = min;
  let woken = false;
  let wake: (() => void) | undefined;
  const unsubscribe = options.notifier?.subscribe(key, (target, all) => {
    if (!all && (!target || target !== options.owner)) {
      if (options.wakes ? !options.wakes(target) : target && options.owner) return;
    }
    woken = true;
    wake?.();
  });
  try {
    for (;;) {
      signal.throwIfAborted();
      woken = false;
      let lease: L | null | 'soon';
      const startedAt = now();
      try {
        lease = await attempt();
        grace.succeeded();
      } catch (error) {
        if (signal.aborted) throw error;
        // A server that refused the connection is down, not slow: that is the locker's grace to
        // ride out (LockerOptions.unavailableGraceMs); this one inside it would add its own.
        if (connectionRefused(error)) throw error;
        grace.failed(error, startedAt);
        lease = null;
      }
      if (lease === 'soon') delay = min;
      else if (lease) {
        if (signal.aborted) {
          await onAbandon(lease);
          signal.throwIfAborted();
        }
        return lease;
      }
      if (!woken) await sleep((options.nextDelayMs?.() ?? delay) * (0.5 + Math.random() * 0.5), signal, (w) => (wake = w));
      wake = undefined;
      delay = Math.min(max, delay * 2);
    }
  } finally {
    unsubscribe?.();
  }
}

/** The pause before an attempt is made again: the first, and the most it doubles up to after failures. */
const AGAIN_PAUSE_MS = 20;
const AGAIN_PAUSE_MAX_MS = 1000;

/**
 * Runs `attempt` until it returns something other than `'again'`, for a wait that must ride out a
 * store it cannot reach for a while. Core's `lock()` runs every acquisition through it; a backend
 * whose waiter blocks inside the store on a connection of its own (a session-mode lock) runs its
 * waits through it too. An attempt that returns `'again'` (say its connection was cut) is made again.
 * A waiting attempt that fails as unavailable is made again as well, after a pause that doubles
 * with each failure (jittered, 20 ms up to 1 s), until attempts have failed for `graceMs` in a row; a store that stays unreachable still fails the wait. That also covers a connection not had
 * in time: a crowd of waiters opening connections at once on a loaded machine can outlast a
 * connect timeout. `reachedAt` (optional) tells when the store was last reached by anyone (a
 * connection opened): failures with the store reached since they began show a store that is slow,
 * not down, and start the grace again, so the wait goes on for as long as the caller allowed.
 * Rejects with `signal.reason` when `signal` aborts, and with any other error (or any error of a
 * one-shot attempt, `wait` false) at once.
 */
export async function waitOnConnections<L>(
  wait: boolean,
  signal: AbortSignal,
  graceMs: number,
  attempt: () => Promise<L | 'again'>,
  reachedAt?: () => number,
): Promise<L> {
  const grace = new UnavailableGrace(graceMs, reachedAt);
  let pauseMs = AGAIN_PAUSE_MS;
  for (;;) {
    const startedAt = now();
    try {
      const outcome = await attempt();
      if (outcome !== 'again') return outcome;
      pauseMs = AGAIN_PAUSE_MS;
    } catch (error) {
      if (!wait || signal.aborted) throw error;
      grace.failed(error, startedAt);
      pauseMs = Math.min(AGAIN_PAUSE_MAX_MS, pauseMs * 2);
    }
    await sleep(pauseMs * (0.5 + Math.random() * 0.5), signal);
  }
}

/**
 * How a waiting loop rides out connection resets: an attempt that fails with
 * `BackendUnavailableError` is forgiven until an attempt begun `graceMs` or more after the first
 * failure of a row fails too (a reset costs one failed attempt; a store that stays unreachable
 * fails the wait). From that failure's end, as a store that answers late is not down: a first
 * attempt that took its request timeout to fail leaves the grace whole for the quick failures of
 * reconnecting after it. To the latest attempt's start, as one attempt slow to fail (a request a
 * driver lost in a reset, ended only by its timeout) says nothing of the store after it began.
 * Call `succeeded()` after every attempt that reached the store; `reachedAt`, when given, tells
 * when anyone last reached it (`performance.now()`), which ends a row of failures as well.
 */
export class UnavailableGrace {
  readonly #graceMs: number;
  readonly #reachedAt: (() => number) | undefined;
  #since: number | undefined;

  constructor(graceMs = 1000, reachedAt?: () => number) {
    this.#graceMs = graceMs;
    this.#reachedAt = reachedAt;
  }

  /** Ends a row of failures: an attempt reached the store. */
  succeeded(): void {
    this.#since = undefined;
  }

  /** Returns when `error`, of an attempt begun at `startedAt` (`performance.now()`), is forgiven; rethrows it otherwise. */
  failed(error: unknown, startedAt: number): void {
    if (!(error instanceof BackendUnavailableError)) throw error;
    if (this.#since !== undefined && this.#reachedAt && this.#reachedAt() > this.#since) this.#since = undefined;
    this.#since ??= now();
    // At the row's first failure this is 0: a grace of 0 fails it.
    if (Math.max(0, startedAt - this.#since) >= this.#graceMs) throw error;
  }
}

/**
 * Resolves after `ms`, or early when the function handed to `onWakeable` is called; rejects with
 * `signal.reason` when `signal` aborts.
 */
export function sleep(ms: number, signal?: AbortSignal, onWakeable?: (wake: () => void) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const done = () => {
      timer.cancel();
      signal?.removeEventListener('abort', onAbort);
      resolve();
    };
    const onAbort = () => {
      timer.cancel();
      reject(signal!.reason);
    };
    const timer = after(ms, done);
    signal?.addEventListener('abort', onAbort, { once: true });
    onWakeable?.(done);
  });
}

/**
 * The calls a backend has in flight, so that `close()` can let aborted acquisitions finish
 * removing what they wrote before it closes the connections they need for that. (Core stops
 * waiting for an aborted acquire at once; the backend's cleanup goes on behind it.) Its cleanups
 * outlast a store out of reach for a while: see `cleanUp`.
 */
export class InFlight {
  /**
   * Calls tracked and not settled yet: a count, not a set of them (every acquisition is tracked,
   * and a set's add and delete of each call's promise cost more than the rest of this class).
   */
  #pending = 0;
  /** What `settled()` calls wait for: woken when `#pending` reaches 0. */
  #onIdle: (() => void)[] = [];
  readonly #settle = (): void => {
    if (--this.#pending > 0 || this.#onIdle.length === 0) return;
    const waiting = this.#onIdle;
    this.#onIdle = [];
    for (const wake of waiting) wake();
  };
  /** Aborted by `settled()`: the backend is closing, and cleanups still being retried make one last try at once. */
  readonly #closing = new AbortController();
  /** The first `close()`'s promise, which every later one returns. */
  #closed: Promise<void> | undefined;
  readonly #answerWithinMs: number;
  readonly #backend: string;

  /**
   * `backend`: its name, for errors. `answerWithinMs`: the longest the backend waits for the store's answer to one request (its
   * command timeout). A write may land that late, so what it wrote may live that much longer;
   * and `close()` waits that long for the calls in flight (`settled`).
   */
  constructor(backend: string, answerWithinMs: number) {
    this.#backend = backend;
    this.#answerWithinMs = answerWithinMs;
  }

  /**
   * Starts `start` (an acquisition) and tracks it until it settles. Once the backend is closing
   * (`settled` was called), rejects with `LockerClosedError` instead, starting nothing: a closed
   * pool or client would fail the call as a store out of reach, which a wait rides out for its
   * grace and then reports as unavailable.
   */
  track<T>(start: () => Promise<T>): Promise<T> {
    if (this.#closing.signal.aborted) return Promise.reject(new LockerClosedError(`the ${this.#backend} backend is closed`));
    const call = start();
    this.keep(call);
    return call;
  }

  /**
   * Tracks `work` until it settles: requests already sent whose answers nobody waits for any more
   * (a call that settled on a majority of nodes, say), so that `close()` lets them land before it
   * closes the connections they are on. Keep it before the backend's `close()` (core releases
   * held locks before it closes the backend): `settled` waits until nothing tracked is left. Unlike `track`, it never refuses: that work is out already. Never rejects.
   */
  keep(work: Promise<unknown>): void {
    this.#pending++;
    work.then(this.#settle, this.#settle);
  }

  /**
   * Sends `send`, a cleanup: the call that removes what an acquisition left in the store (its
   * place in line, a claim). Should it fail with `BackendUnavailableError`, it is sent again in
   * the background (tracked here), 100 ms later and then at pauses doubling up to a second, until
   * it lands, what it removes has expired anyway (`untilMs`, local monotonic ms: when the ttl of
   * its last write runs out, counted from that write's send; plus a request's answer time, for a
   * write that landed late), or
   * the backend closes (then once more, at once). Without it, a waiter that gives up while the
   * store is out of reach (a reset, a restart) leaves its place ahead of everyone else's, and
   * every other client waits out its ttl. `send` must be safe to land late: owner-checked, or
   * timestamped before any later write. Owner-checked is safe only if no later attempt uses the
   * same owner: core gives every attempt its own id, but a backend's own wait loop
   * (`pollForLease`) tries again under the same one, so a cleanup sent from inside that loop must
   * end the wait rather than let it go on (see Cassandra's lwt.ts).
   * @throws the first attempt's error, as it is: the caller still learns that the store failed.
   */
  async cleanUp(send: () => Promise<unknown>, untilMs: number): Promise<void> {
    try {
      await send();
    } catch (error) {
      if (error instanceof BackendUnavailableError && !this.#closing.signal.aborted)
        void this.track(() => this.#sendLater(send, untilMs + this.#answerWithinMs));
      throw error;
    }
  }

  /**
   * `cleanUp` for a wait with a lease of `ttlMs` that ended without a grant (aborted, timed out,
   * failed): `send` removes its place in line (which lasts `waiterCadence`'s `placeMs`) and any
   * grant it may have won as it ended (`ttlMs`). Never rejects: the wait's own error is what its
   * caller hears.
   */
  leave(send: () => Promise<unknown>, ttlMs: number): Promise<void> {
    return this.cleanUp(send, now() + Math.max(ttlMs, MIN_WAITER_PLACE_MS)).catch(noop);
  }

  /**
   * A wait in the store's line that leaves the line when it ends without a grant: runs `wait`, and
   * should it reject (aborted, timed out, failed), `leave`s before passing its error on, so that
   * nothing of this waiter stays behind (sent again later if the store is out of reach). The
   * pattern every queued wait of a backend shares: write it once here. `ttlMs`: the wait's lease,
   * see `leave`.
   * @throws what `wait` threw, once `leave` has been sent (whose own failure is not reported).
   */
  async waitInLine<T>(wait: () => Promise<T>, leave: () => Promise<unknown>, ttlMs: number): Promise<T> {
    try {
      return await wait();
    } catch (error) {
      await this.leave(leave, ttlMs);
      throw error;
    }
  }

  async #sendLater(send: () => Promise<unknown>, untilMs: number): Promise<void> {
    for (let pauseMs = 100; now() < untilMs; pauseMs = Math.min(1000, pauseMs * 2)) {
      await sleep(pauseMs, this.#closing.signal).catch(() => undefined);
      try {
        await send();
        return;
      } catch {
        if (this.#closing.signal.aborted) return; // that was its last try
      }
    }
  }

  /**
   * A backend's `close()`, written once. The first call waits for the calls in flight (`settled`):
   * core aborts every acquisition before it closes the backend, and each then removes what it
   * wrote (its place in line, its claim, its lease), which closing the connections at once would
   * cut short, leaving it to block the key for a ttl. Then it runs `closeConnections` (what the
   * backend opened itself). Every later call returns the first call's promise, so a second
   * `close()` also resolves only once the connections are closed.
   * @throws what `closeConnections` threw, to every caller.
   */
  close(closeConnections: () => unknown): Promise<void> {
    this.#closed ??= this.settled().then(async () => {
      await closeConnections();
    });
    return this.#closed;
  }

  /**
   * What a backend's `close()` awaits before it closes its connections: resolves once no tracked
   * call is left (those tracked so far, and any they keep meanwhile), or after a request's answer
   * time (a store gone silent would hold a cleanup for ever). Cleanups still being retried make
   * their last try now. Never rejects.
   */
  async settled(): Promise<void> {
    this.#closing.abort();
    if (this.#pending === 0) return;
    await settleWithin(new Promise<void>((resolve) => this.#onIdle.push(resolve)), this.#answerWithinMs);
  }
}

/** The socket error codes of a connection no server took: nothing listens there, or no route leads there. */
const REFUSALS = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH']);

/**
 * Whether `error`, or an error it was caused by, is a connection no server took. A backend's own
 * loops that ride out failures (`pollForLease`, session-mode waits) leave those to the locker's
 * grace, which is the one bound on how long a wait rides out a store that is down.
 */
export function connectionRefused(error: unknown, depth = 0): boolean {
  if (!(error instanceof Error) || depth > 4) return false;
  if (REFUSALS.has(String((error as { code?: unknown }).code))) return true;
  const inner = error instanceof AggregateError ? error.errors : [];
  return [error.cause, ...inner].some((e) => connectionRefused(e, depth + 1));
}
