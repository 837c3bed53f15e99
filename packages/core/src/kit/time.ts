/**
 * Timers and deadlines that hold for any length of time. Node's `setTimeout` fires after 1 ms for
 * any delay above 2^31 − 1 ms (about 24.8 days), which turned "wait forever" timeouts into instant
 * ones and 100-day leases into a renewal loop; everything in core that waits goes through here.
 */
import { noAnswer, type BackendUnavailableError, type StorePlace } from '../api/errors.js';

/**
 * This process's wall clock in whole microseconds (its start time plus the monotonic clock since,
 * so it never steps back within the process). For ordering and for hints a store checks, never for
 * how long a lease lasts: that is the monotonic clock's job.
 */
export function wallMicros(): number {
  return Math.floor((performance.timeOrigin + performance.now()) * 1000);
}

/**
 * What stands in for the monotonic clock and Node's timers throughout core while a test clock is
 * installed (`createTestLocker` in `@deadbolt/core/testing`): its time, and timers that fire only
 * when the test moves it.
 */
export interface ClockStandIn {
  now(): number;
  after(ms: number, fn: () => void): Timer;
}

let standIn: ClockStandIn | undefined;

/**
 * The monotonic clock every lease time in core is read on: `performance.now()`, or the test
 * clock's time while one is installed. A store backend's `acquiredAt` is `performance.now()`: the
 * same clock whenever no test clock is installed, and `createLocker` refuses a store backend while
 * one is.
 */
export function now(): number {
  return standIn === undefined ? performance.now() : standIn.now();
}

/**
 * Installs `clock` in place of the monotonic clock and Node's timers for all of core in this
 * process (`undefined` puts the real ones back). Timers armed before stay on the clock they were
 * armed on. Throws nothing.
 */
export function setClockStandIn(clock: ClockStandIn | undefined): void {
  standIn = clock;
}

/** Whether a test clock stands in for the real one now. */
export function clockStandsIn(): boolean {
  return standIn !== undefined;
}

/**
 * Whether a store's record written at `written.at` (`performance.now()` when the write was sent)
 * with a ttl of at least `written.ttlMs` from its landing is certainly still there, barring a
 * delete: less than half its ttl has passed here (half: room for any difference in clock rates).
 * A backend that counts a lease from an earlier write (a grant handed over, or found by a read)
 * trusts it only while this holds, and otherwise writes again.
 */
export function stillStands(written: { readonly at: number; readonly ttlMs: number }): boolean {
  return now() - written.at < written.ttlMs / 2;
}

/** The longest delay one Node timer can wait. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** A pending `after()` call. */
export interface Timer {
  /** Stops the call from happening; nothing if it already happened. */
  cancel(): void;
}

/**
 * Calls `fn` once, `ms` from now on the monotonic clock, never earlier: any non-negative length,
 * Infinity meaning never. `unref`: the timer alone does not keep the process alive.
 *
 * Every lock arms and cancels timers (its renewal, each store call's deadline) at the rate it is
 * taken, and a Node timer costs more than the rest of an in-process lock cycle. So calls with the
 * same whole-millisecond delay share one Node timer: they wait in a list in the order they were
 * armed (their deadlines are then in order too, give or take under a millisecond), and the list's
 * one timer fires for its head. Cancelling unlinks an entry; a list left empty keeps its timer
 * only unref'd (so a cancelled timer never holds the process open), for the next timer of its delay.
 * Waits with ever new delays (each key of a `lockAll` gets what is left of one deadline) would then
 * keep a list and a Node timer per delay until it passed, so making a list once there are many
 * first drops the empty ones (`listFor`): the bookkeeping happens when lists are made, never on the
 * arm-and-cancel path a lock cycle takes. Delays too long for one Node timer chain them. `at`: the
 * caller's `now()`, if it just read it. While a test clock stands in, the timer is the test clock's.
 */
export function after(ms: number, fn: () => void, unref = false, at?: number): Timer {
  if (ms === Infinity) return NEVER;
  if (standIn !== undefined) return standIn.after(ms, fn);
  const deadline = (at ?? performance.now()) + ms;
  const whole = Math.max(1, Math.ceil(ms));
  if (whole > MAX_TIMER_MS) return chained(deadline, fn, unref);
  return listFor(unref ? unrefLists : refLists, whole, unref).add(deadline, fn);
}

const NEVER: Timer = { cancel: () => undefined };

/** A delay longer than one Node timer can wait: chain timers, re-arming for what is left. */
function chained(deadline: number, fn: () => void, unref: boolean): Timer {
  let handle: NodeJS.Timeout | undefined;
  const arm = () => {
    const left = deadline - performance.now();
    if (left <= 0) return fn();
    handle = setTimeout(arm, nodeDelay(Math.min(Math.ceil(left), MAX_TIMER_MS)));
    if (unref) handle.unref();
  };
  arm();
  return { cancel: () => clearTimeout(handle) };
}

class Entry implements Timer {
  prev: Entry | undefined;
  next: Entry | undefined;

  constructor(
    readonly deadline: number,
    readonly fn: () => void,
    /** The list it waits in; undefined once it fired or was cancelled. */
    public list: TimerList | undefined,
  ) {}

  cancel(): void {
    this.list?.remove(this);
  }
}

const refLists = new Map<number, TimerList>();
const unrefLists = new Map<number, TimerList>();

/** Lists kept without a sweep: enough for every delay a busy process arms over and over. */
const LISTS_KEPT = 64;
/** Making a list when this many exist first drops the empty ones; then twice what is left, at least LISTS_KEPT. */
let sweepAt = LISTS_KEPT;

/** The list of timers of delay `whole` (made if there is none; see `after` for when empty lists go). */
function listFor(lists: Map<number, TimerList>, whole: number, unref: boolean): TimerList {
  const list = lists.get(whole);
  if (list) return list;
  if (refLists.size + unrefLists.size >= sweepAt) {
    for (const each of refLists.values()) each.dropIfEmpty();
    for (const each of unrefLists.values()) each.dropIfEmpty();
    // Doubling keeps the sweeps' cost, amortized over the lists made, constant per list.
    sweepAt = Math.max(LISTS_KEPT, 2 * (refLists.size + unrefLists.size));
  }
  const made = new TimerList(lists, whole, unref);
  lists.set(whole, made);
  return made;
}

/**
 * The delay a Node timer is armed with for `ms`: `ms` itself up to 64, above that rounded down to
 * one of 32 steps per doubling (within 3 %). Node keeps internal state for every distinct delay
 * it was ever given (about 110 bytes each, never given back), so 100 000 waits with distinct
 * timeouts would leave megabytes behind; with these at most ~850 delays exist. A timer that fires
 * early finds its head not yet due and re-arms for what is left, which converges in a step or two.
 */
export function nodeDelay(ms: number): number {
  if (ms <= 64) return ms;
  const step = 2 ** (Math.floor(Math.log2(ms)) - 5);
  return Math.floor(ms / step) * step;
}

/** How many timer lists exist (tests: cancelled timers must not pile up). */
export function timerLists(): number {
  return refLists.size + unrefLists.size;
}

/** The timers of one whole-millisecond delay (see `after`). */
class TimerList {
  #head: Entry | undefined;
  #tail: Entry | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly lists: Map<number, TimerList>,
    private readonly ms: number,
    private readonly unref: boolean,
  ) {}

  add(deadline: number, fn: () => void): Entry {
    const entry = new Entry(deadline, fn, this);
    entry.prev = this.#tail;
    if (this.#tail) this.#tail.next = entry;
    else this.#head = entry;
    this.#tail = entry;
    // A timer left from entries since cancelled fires no later than this one is due: it re-arms
    // for the head then. It only has to hold the process open again.
    if (!this.#timer) this.#arm(this.ms);
    else if (!this.unref && this.#head === entry) this.#timer.ref();
    return entry;
  }

  remove(entry: Entry): void {
    if (entry.prev) entry.prev.next = entry.next;
    else this.#head = entry.next;
    if (entry.next) entry.next.prev = entry.prev;
    else this.#tail = entry.prev;
    entry.prev = entry.next = entry.list = undefined;
    if (!this.#head) this.#timer?.unref();
  }

  /** Gives up the list and its timer if no timer waits in it. */
  dropIfEmpty(): void {
    if (!this.#head) this.#drop();
  }

  #drop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.lists.get(this.ms) === this) this.lists.delete(this.ms);
  }

  #arm(ms: number): void {
    this.#timer = setTimeout(this.#fire, nodeDelay(ms));
    if (this.unref) this.#timer.unref();
  }

  readonly #fire = (): void => {
    this.#timer = undefined;
    const now = performance.now();
    let failure: { error: unknown } | undefined;
    // Node timers count from a cached loop time and may fire a fraction early: the head decides.
    for (let e = this.#head; e && e.deadline <= now; e = this.#head) {
      this.remove(e);
      try {
        e.fn();
      } catch (error) {
        failure ??= { error };
      }
    }
    // A callback that armed a timer of this delay armed the list's timer for its own entry: the
    // head may be due sooner, so arm for the head instead.
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#head) this.#arm(Math.max(1, Math.ceil(this.#head.deadline - performance.now())));
    else this.#drop();
    // As a throwing Node timer callback would: an uncaught exception, after the others ran.
    if (failure) {
      const { error } = failure;
      queueMicrotask(() => {
        throw error;
      });
    }
  };
}

/**
 * Settles as `promise` does, unless `arm`'s `fail` is called first; `arm` returns how to disarm
 * once the promise settles. A value that arrives after a failure goes to `onLate`.
 */
export function race<T>(promise: Promise<T>, arm: (fail: (error: unknown) => void) => () => void, onLate?: (value: T) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const disarm = arm((error) => {
      if (settled) return;
      settled = true;
      reject(error);
    });
    promise.then(
      (value) => {
        if (settled) return onLate?.(value);
        settled = true;
        disarm();
        resolve(value);
      },
      (error: unknown) => {
        if (settled) return;
        settled = true;
        disarm();
        reject(error);
      },
    );
  });
}

/**
 * Settles as `promise` does, or rejects with `signal.reason` as soon as `signal` aborts, whichever
 * comes first. A value that arrives after the abort goes to `onLate` (e.g. to hand back a late
 * grant), so nothing the store gave is dropped unseen.
 */
export function raceSignal<T>(promise: Promise<T>, signal: AbortSignal, onLate?: (value: T) => void): Promise<T> {
  return race(
    promise,
    (fail) => {
      const onAbort = () => fail(signal.reason);
      if (signal.aborted) {
        onAbort();
        return () => undefined;
      }
      signal.addEventListener('abort', onAbort, { once: true });
      return () => signal.removeEventListener('abort', onAbort);
    },
    onLate,
  );
}

/**
 * A deadline for an answer: `fn` runs `ms` from now as with `after()`, but only once the I/O this
 * process had already received by then has been handled (`setImmediate` runs after the poll
 * phase). When the process was busy or got no CPU for longer than `ms` (a loaded machine), its
 * timers run late and first, while the answer may already sit in the socket: without the wait,
 * that answer would lose to a timer that measured this process's stall, not the store's silence.
 * `unref`: as for `after()`.
 */
export function answerDeadline(ms: number, fn: () => void, unref = false): Timer {
  let verdict: NodeJS.Immediate | undefined;
  const timer = after(ms, () => (verdict = setImmediate(fn)), unref);
  return {
    cancel() {
      timer.cancel();
      if (verdict) clearImmediate(verdict);
    },
  };
}

/**
 * Settles as `promise` does, or rejects with `timeoutError()` when no answer came within `ms`
 * (`answerDeadline`). A value that arrives later goes to `onLate`.
 */
export function withTimeout<T>(promise: Promise<T>, ms: number, timeoutError: () => Error, onLate?: (value: T) => void): Promise<T> {
  return race(
    promise,
    (fail) => {
      const deadline = answerDeadline(ms, () => fail(timeoutError()));
      return () => deadline.cancel();
    },
    onLate,
  );
}

/**
 * A store call given `ms` to answer: `promise`, or, once `ms` have passed without an answer,
 * `onSilent` with the error (drop a connection gone silent, say) and a rejection with BackendUnavailableError
 * ("no answer within `ms` ms") for `operation` on `store`. A late answer goes to `onLate` (give
 * back what it took). @throws what `promise` throws, as it is.
 */
export function answerWithin<T>(
  promise: Promise<T>,
  ms: number,
  store: string | StorePlace,
  operation: string,
  late: { readonly onSilent?: (error: BackendUnavailableError) => void; readonly onLate?: (value: T) => void } = {},
): Promise<T> {
  return withTimeout(
    promise,
    ms,
    () => {
      const error = noAnswer(store, operation, ms);
      late.onSilent?.(error);
      return error;
    },
    late.onLate,
  );
}

/**
 * Waits for `promise` to settle, but at most `ms` (a plain timer: a grace this process gives, not a
 * verdict on a store's answer). Never rejects.
 */
export function settleWithin(promise: Promise<unknown>, ms: number): Promise<void> {
  return race(promise.then(noop, noop), (fail) => {
    const timer = after(ms, () => fail(undefined));
    return () => timer.cancel();
  }).catch(noop);
}

/** Does nothing: the handler for a settlement nobody needs (a late answer, a cleanup's outcome). */
export const noop = (): void => undefined;
