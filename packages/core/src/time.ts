/**
 * Timers and deadlines that hold for any length of time. Node's `setTimeout` fires after 1 ms for
 * any delay above 2^31 − 1 ms (about 24.8 days), which turned "wait forever" timeouts into instant
 * ones and 100-day leases into a renewal loop; everything in core that waits goes through here.
 */

/** The longest delay one Node timer can wait. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** A pending `after()` call. */
export interface Timer {
  cancel(): void;
}

/**
 * Calls `fn` once, `ms` from now on the monotonic clock, never earlier: any non-negative length,
 * Infinity meaning never. Long delays chain Node timers; a Node timer counts whole milliseconds
 * from the event loop's cached time and can fire a fraction early, so an early one re-arms for the
 * rest. `unref`: the timer alone does not keep the process alive.
 */
export function after(ms: number, fn: () => void, unref = false): Timer {
  let handle: NodeJS.Timeout | undefined;
  const deadline = performance.now() + ms;
  const arm = () => {
    const left = deadline - performance.now();
    if (left <= 0) return fn();
    handle = setTimeout(arm, Math.min(Math.ceil(left), MAX_TIMER_MS));
    if (unref) handle.unref();
  };
  if (ms !== Infinity) handle = setTimeout(arm, Math.min(Math.ceil(ms), MAX_TIMER_MS));
  if (unref) handle?.unref();
  return { cancel: () => clearTimeout(handle) };
}

/**
 * Settles as `promise` does, unless `arm`'s `fail` is called first; `arm` returns how to disarm
 * once the promise settles. A value that arrives after a failure goes to `onLate`.
 */
function race<T>(promise: Promise<T>, arm: (fail: (error: unknown) => void) => () => void, onLate?: (value: T) => void): Promise<T> {
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
  return race(promise, (fail) => {
    const onAbort = () => fail(signal.reason);
    if (signal.aborted) {
      onAbort();
      return () => undefined;
    }
    signal.addEventListener('abort', onAbort, { once: true });
    return () => signal.removeEventListener('abort', onAbort);
  }, onLate);
}

/**
 * Settles as `promise` does, or rejects with `timeoutError()` after `ms`. A value that arrives
 * later goes to `onLate`.
 */
export function withTimeout<T>(promise: Promise<T>, ms: number, timeoutError: () => Error, onLate?: (value: T) => void): Promise<T> {
  return race(promise, (fail) => {
    const timer = after(ms, () => fail(timeoutError()));
    return () => timer.cancel();
  }, onLate);
}
