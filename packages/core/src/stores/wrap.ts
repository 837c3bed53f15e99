import type { Lease, LockBackend } from '../kit/backend.js';

/**
 * Every member of the contract, checked by the compiler against `LockBackend` both ways: a member
 * added to the contract and missing here does not compile, so no wrapper can silently drop it.
 */
const MEMBERS = {
  name: 'value',
  address: 'value',
  capabilities: 'value',
  acquire: 'call',
  acquireNow: 'call',
  releaseNow: 'call',
  renew: 'call',
  release: 'call',
  raiseTokenFloor: 'call',
  tokenFloor: 'call',
  tokenCeiling: 'call',
  inspect: 'call',
  forceRelease: 'call',
  close: 'call',
} as const satisfies Record<keyof LockBackend, 'value' | 'call'>;

/** The contract's methods, by name. */
export type BackendMethod = { [K in keyof typeof MEMBERS]: (typeof MEMBERS)[K] extends 'call' ? K : never }[keyof typeof MEMBERS];

/** The on-the-spot forms, each of which stands for its asynchronous method. */
const ON_THE_SPOT: Partial<Record<keyof LockBackend, keyof LockBackend>> = { acquireNow: 'acquire', releaseNow: 'release' };

/**
 * `inner` with the members in `overrides` replaced and every other member, the optional ones
 * included, forwarded to `inner` as it has them. An override set to `undefined` leaves that
 * optional member out (a test that wants core's path for a store without it). Overriding
 * `acquire` or `release` leaves out `inner`'s `acquireNow` or `releaseNow` unless those are
 * overridden too: core would otherwise answer on the spot and never reach the override. For
 * wrappers that watch, delay or count what reaches a store: hand-written forwarding is how
 * `acquireNow` or `raiseTokenFloor` used to go missing. Throws nothing.
 */
export function wrapBackend<L extends Lease>(inner: LockBackend<L>, overrides: Partial<LockBackend<L>> = {}): LockBackend<L> {
  const wrapped: Partial<LockBackend<L>> = {};
  const set = wrapped as Record<string, unknown>;
  for (const [member, kind] of Object.entries(MEMBERS) as [keyof LockBackend<L>, 'value' | 'call'][]) {
    if (Object.hasOwn(overrides, member)) {
      if (overrides[member] !== undefined) set[member] = overrides[member];
      continue;
    }
    const standsFor = ON_THE_SPOT[member];
    if (standsFor && Object.hasOwn(overrides, standsFor)) continue;
    const own = inner[member];
    if (own === undefined) continue;
    set[member] = kind === 'call' ? (own as (...args: unknown[]) => unknown).bind(inner) : own;
  }
  // Complete: name, capabilities and the required methods come from `inner` or `overrides`.
  return wrapped as LockBackend<L>;
}

/**
 * `inner` with every store call (each method but `close`) reported to `onCall` by name before it is
 * made. Throws nothing of its own.
 */
export function observeBackend<L extends Lease>(
  inner: LockBackend<L>,
  onCall: (method: Exclude<BackendMethod, 'close'>) => void,
): LockBackend<L> {
  const overrides: Record<string, unknown> = {};
  for (const [member, kind] of Object.entries(MEMBERS) as [BackendMethod, 'value' | 'call'][]) {
    const own = inner[member as keyof LockBackend<L>];
    if (kind !== 'call' || member === 'close' || typeof own !== 'function') continue;
    overrides[member] = (...args: unknown[]) => {
      onCall(member as Exclude<BackendMethod, 'close'>);
      return (own as (...args: unknown[]) => unknown).apply(inner, args);
    };
  }
  return wrapBackend(inner, overrides as Partial<LockBackend<L>>);
}
