// Fenced writes: the check that makes a fencing token worth having. A lock alone cannot stop a
// holder that was paused (a long GC, a stopped VM, a slow network) past its lease from writing
// after someone else took the lock; the resource it writes to can, if it remembers the highest
// token it has accepted and refuses anything lower. Each store package ships a `Fence` for data
// kept in that store; this file holds the contract, its input rules and the in-process one.
import { InvalidArgumentError, noAnswer, StaleTokenError } from '../api/errors.js';
import { describe, ms, readOptions, signal, type Rules } from './options.js';
import { answerDeadline, raceSignal } from './time.js';
import { validateKey } from '../api/validate.js';
import type { Fence, FencedValue, FenceWriteOptions } from '../api/types.js';

export type { Fence, FencedValue, FenceWriteOptions };

/** The highest token a fence accepts plus one: every store keeps tokens below it exactly (38 decimal digits). */
export const FENCE_TOKEN_LIMIT = 10n ** 38n;

/**
 * Checks a fenced write's arguments before any I/O.
 * @throws InvalidArgumentError naming what is wrong.
 */
export function checkFencedWrite(resource: unknown, token: unknown, value: unknown): asserts resource is string {
  checkFenceToken(resource, token);
  if (typeof value !== 'string') throw new InvalidArgumentError(`value must be a string, got ${describe(value)}`);
  // What no store here can keep: every store but memory holds text as UTF-8, where a lone
  // surrogate becomes U+FFFD (another string would be read back), and PostgreSQL's text holds no
  // U+0000. Refused everywhere, memory included, so a value means the same on every store.
  if (!value.isWellFormed())
    throw new InvalidArgumentError('value must be well-formed Unicode: it holds a lone UTF-16 surrogate, which stores keep as U+FFFD');
  if (value.includes('\u0000')) throw new InvalidArgumentError('value must not contain U+0000 (PostgreSQL cannot store it in text)');
}

/** How long a fenced write may take by default: 10 s. */
export const DEFAULT_FENCE_TIMEOUT_MS = 10_000;

const FENCE_WRITE_RULES = { timeoutMs: ms(), signal } satisfies Rules<FenceWriteOptions>;

/**
 * A fenced write as every fence runs it: the arguments and options checked before any I/O, then
 * `write` run with a signal that aborts at the write's deadline (or with the caller's signal), and
 * raced against it, so the write settles by then whatever the store does. A fence whose
 * check-and-write can lose a race (an optimistic, versioned write) retries until that signal
 * aborts, never a fixed number of times: contention makes a write slower, never a failure.
 * @throws InvalidArgumentError (see `checkFencedWrite`, and for bad options); what `write` throws;
 * BackendUnavailableError at the deadline; the signal's reason when it aborts.
 */
export async function runFencedWrite(
  store: string,
  args: { readonly resource: unknown; readonly token: unknown; readonly value: unknown; readonly options: unknown },
  write: (deadline: AbortSignal) => Promise<void>,
): Promise<void> {
  checkFencedWrite(args.resource, args.token, args.value);
  const options = readOptions(args.options, FENCE_WRITE_RULES, 'write');
  const timeoutMs = options.timeoutMs ?? DEFAULT_FENCE_TIMEOUT_MS;
  options.signal?.throwIfAborted();
  const deadline = new AbortController();
  const timer = answerDeadline(timeoutMs, () => deadline.abort(noAnswer(store, 'fenced write', timeoutMs)));
  const onAbort = () => deadline.abort(options.signal!.reason);
  options.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    await raceSignal(write(deadline.signal), deadline.signal);
  } finally {
    timer.cancel();
    options.signal?.removeEventListener('abort', onAbort);
  }
}

/**
 * What every store's fence shares, written once: a backend package's fence extends it and writes
 * only its store's part. `write` checks the arguments and options before any I/O and runs
 * `writeValue` raced against the write's deadline (`runFencedWrite`); `read` checks the resource
 * before `readValue` runs. @throws from `write` and `read` what `Fence` says: InvalidArgumentError
 * before any I/O, and what the store's part throws (StaleTokenError, BackendUnavailableError /
 * BackendError), BackendUnavailableError at the write's deadline.
 */
export abstract class StoreFence implements Fence {
  /** The store's name, as errors name it. */
  readonly #store: string;
  /** What `close()` ends, in order: what the fence opened (`closes`). */
  readonly #closers: (() => unknown)[] = [];
  #closed: Promise<void> | undefined;

  protected constructor(store: string) {
    this.#store = store;
  }

  async write(resource: string, token: bigint, value: string, options?: FenceWriteOptions): Promise<void> {
    await runFencedWrite(this.#store, { resource, token, value, options }, (deadline) => this.writeValue(resource, token, value, deadline));
  }

  async read(resource: string): Promise<FencedValue | null> {
    checkResource(resource);
    return this.readValue(resource);
  }

  /**
   * Closes, once, what the fence opened (each `closes` in turn; a client it was given stays open,
   * as `StoreClient.end` leaves it). Never throws: a close that fails leaves nothing to retry.
   */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      for (const close of this.#closers)
        await Promise.resolve()
          .then(close)
          .catch(() => undefined);
    })();
    return this.#closed;
  }

  /** Has `close()` run `close` (a client's `end`, a session pool's close); its errors are dropped. */
  protected closes(close: () => unknown): void {
    this.#closers.push(close);
  }

  /**
   * Writes `value` with `token` to a checked `resource`, or throws StaleTokenError; stops when
   * `deadline` aborts (a write that retries a lost race looks at it between tries).
   */
  protected abstract writeValue(resource: string, token: bigint, value: string, deadline: AbortSignal): Promise<void>;

  /** The value and token of a checked `resource`; null if it was never written. */
  protected abstract readValue(resource: string): Promise<FencedValue | null>;
}

/**
 * Checks a resource and the token a write to it carries (a guard in a transaction, which writes
 * no value of its own), before any I/O. @throws InvalidArgumentError naming what is wrong.
 */
export function checkFenceToken(resource: unknown, token: unknown): asserts resource is string {
  checkResource(resource);
  if (typeof token !== 'bigint' || token < 0n || token >= FENCE_TOKEN_LIMIT) {
    throw new InvalidArgumentError(`token must be a lock's fencing token (a bigint from 0 up to 10^38 - 1), got ${describe(token)}`);
  }
}

/** @throws InvalidArgumentError unless `resource` passes the lock key rules. */
export function checkResource(resource: unknown): asserts resource is string {
  try {
    validateKey(resource);
  } catch (error) {
    throw new InvalidArgumentError(`resource: ${(error as Error).message.replace(/^key /, '')}`);
  }
}

/** The part of a SQL store a fence's transaction uses: a connection, one statement on it, typed errors. */
export interface SqlConnections<C> {
  /** A connection for one transaction, given back when it ends; the driver's error when none can be had. */
  connection(): Promise<C>;
  /** One statement on `tx`; the driver's error when it fails. */
  on(tx: C, statement: string, params: unknown[]): Promise<unknown>;
  /** The typed error (`BackendUnavailableError` / `BackendError`) for a driver's. */
  error(operation: string, error: unknown): Error;
}

/**
 * `fn(tx)` in one transaction of its own (a connection from `store`) after the fence's `guard`:
 * committed when it resolves, rolled back when it or the guard throws; the connection is given
 * back by `release`, as broken when even the rollback failed.
 * @throws what the guard or `fn` threw (unchanged), or the typed error of a failed BEGIN / COMMIT.
 */
export async function fencedTransaction<C, T>(
  store: SqlConnections<C>,
  steps: { readonly begin: string; guard(tx: C): Promise<void>; release(tx: C, broken?: unknown): void },
  fn: (tx: C) => Promise<T>,
): Promise<T> {
  const tx = await store.connection().catch((error: unknown) => {
    throw store.error('connect', error);
  });
  const run = (statement: string) =>
    store.on(tx, statement, []).catch((error: unknown) => {
      throw store.error('fenced transaction', error);
    });
  let broken: unknown;
  try {
    await run(steps.begin);
    await steps.guard(tx);
    const value = await fn(tx);
    await run('COMMIT');
    return value;
  } catch (error) {
    await run('ROLLBACK').catch((rollback: unknown) => (broken = rollback));
    throw error;
  } finally {
    steps.release(tx, broken);
  }
}

/**
 * A fence in this process's memory: for tests, and for resources that live in this process.
 * Never fails but on bad input.
 */
export class MemoryFence extends StoreFence {
  readonly #values = new Map<string, FencedValue>();

  constructor() {
    super('memory');
  }

  protected async writeValue(resource: string, token: bigint, value: string): Promise<void> {
    const held = this.#values.get(resource);
    if (held && token < held.token) throw new StaleTokenError(resource, token, held.token);
    this.#values.set(resource, { value, token });
  }

  protected async readValue(resource: string): Promise<FencedValue | null> {
    return this.#values.get(resource) ?? null;
  }
}

/** A new `MemoryFence`. */
export function memoryFence(): MemoryFence {
  return new MemoryFence();
}
