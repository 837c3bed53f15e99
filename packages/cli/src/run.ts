// `deadbolt run`: take the lock, run the command while holding it, give it back when the command
// ends. The command learns the key and its fencing token from its environment; signals sent to
// deadbolt are passed on; when the lock is lost, the command is stopped (SIGTERM, then SIGKILL
// after a grace period), as `consul lock` does and `etcdctl lock` does not.
import { spawn } from 'node:child_process';
import { constants } from 'node:os';
import { createLocker, type Lock, type Locker } from '@deadbolt/core';
import { CliError, describeError, EXIT } from './exit.js';
import { backendFor } from './stores.js';

export interface RunRequest {
  readonly url: string;
  readonly key: string;
  /** The program and its arguments. */
  readonly command: readonly string[];
  /** `nonblock`: one attempt; otherwise wait at most `timeoutMs` (Infinity: for ever). */
  readonly nonblock: boolean;
  readonly timeoutMs: number;
  /** `mutex` (`lock()`), a read or write lock of the read-write lock `key`, or a permit of the semaphore `key`. */
  readonly kind: { readonly type: 'mutex' | 'read' | 'write' } | { readonly type: 'permit'; readonly limit: number };
  readonly ttlMs: number | undefined;
  /** How long the command has after SIGTERM, once the lock is lost, before SIGKILL. */
  readonly graceMs: number;
  /** Exit code when the key is busy (`nonblock`) or the wait ran out. */
  readonly conflictCode: number;
}

/** Signals passed on to the command (SIGINT and SIGQUIT only when not from a terminal: a terminal sends them to both). */
const FORWARDED = ['SIGTERM', 'SIGHUP', 'SIGUSR1', 'SIGUSR2', 'SIGWINCH', 'SIGINT', 'SIGQUIT'] as const;
const FROM_TERMINAL = new Set(['SIGINT', 'SIGQUIT']);
/** Signals that stop a wait for the lock (deadbolt then exits as if killed by them). */
const INTERRUPTS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

/** Runs `req`; resolves the exit code. @throws CliError, or deadbolt's errors (the caller maps them to exit codes). */
export async function run(req: RunRequest): Promise<number> {
  const locker = createLocker(await backendFor(req.url), req.ttlMs === undefined ? {} : { ttlMs: req.ttlMs });
  try {
    const lock = await take(locker, req);
    return await holding(lock, req);
  } finally {
    await locker.close().catch((error: unknown) => warn(`closing the store's connections: ${describeError(error)}`));
  }
}

/** The lock, or a CliError with the conflict code; a signal meanwhile ends the wait (exit 128 + its number). */
async function take(locker: Locker, req: RunRequest): Promise<Lock> {
  const interrupted = new AbortController();
  const onSignal = (signal: NodeJS.Signals) =>
    interrupted.abort(new CliError(`interrupted by ${signal} while waiting for ${req.key}`, 128 + constants.signals[signal]));
  for (const signal of INTERRUPTS) process.on(signal, onSignal);
  try {
    const options = { signal: interrupted.signal, ...(req.nonblock ? {} : { timeoutMs: req.timeoutMs }) };
    const { kind, key, nonblock } = req;
    let lock: Lock | null;
    try {
      if (kind.type === 'permit') {
        const semaphore = locker.semaphore(key, { limit: kind.limit });
        lock = await (nonblock ? semaphore.tryAcquire(options) : semaphore.acquire(options));
      } else if (kind.type === 'read') {
        lock = await (nonblock ? locker.readWriteLock(key).tryRead(options) : locker.readWriteLock(key).read(options));
      } else if (kind.type === 'write') {
        lock = await (nonblock ? locker.readWriteLock(key).tryWrite(options) : locker.readWriteLock(key).write(options));
      } else {
        lock = await (nonblock ? locker.tryLock(key, options) : locker.lock(key, options));
      }
    } catch (error) {
      if ((error as { code?: string }).code !== 'LOCK_TIMEOUT') throw error;
      throw new CliError(`${req.key} is still held after ${req.timeoutMs / 1000} s`, req.conflictCode);
    }
    if (!lock) throw new CliError(`${req.key} is held`, req.conflictCode);
    return lock;
  } finally {
    for (const signal of INTERRUPTS) process.off(signal, onSignal);
  }
}

/** Runs the command under `lock`, then releases it. Resolves the command's exit code, or EXIT.lost. */
async function holding(lock: Lock, req: RunRequest): Promise<number> {
  const [program, ...args] = req.command;
  const child = spawn(program!, args, {
    stdio: 'inherit',
    env: { ...process.env, DEADBOLT_KEY: req.key, DEADBOLT_TOKEN: lock.token.toString(), DEADBOLT_OWNER: lock.owner },
  });
  const forward = (signal: NodeJS.Signals) => void child.kill(signal);
  const forwarded = FORWARDED.filter((s) => !(FROM_TERMINAL.has(s) && process.stdin.isTTY));
  for (const signal of forwarded) process.on(signal, forward);
  let killTimer: NodeJS.Timeout | undefined;
  const onLost = () => {
    warn(
      `lost the lock on ${req.key} (${describeError(lock.signal.reason)}); stopping the command: SIGTERM, SIGKILL in ${req.graceMs / 1000} s`,
    );
    child.kill('SIGTERM');
    killTimer = setTimeout(() => child.kill('SIGKILL'), req.graceMs);
  };
  lock.signal.addEventListener('abort', onLost, { once: true });
  try {
    const ended = await new Promise<{ code: number | null; signal: NodeJS.Signals | null } | Error>((resolve) => {
      child.once('error', resolve);
      child.once('exit', (code, signal) => resolve({ code, signal }));
    });
    if (ended instanceof Error) {
      const missing = (ended as NodeJS.ErrnoException).code === 'ENOENT' || (ended as NodeJS.ErrnoException).code === 'EACCES';
      throw new CliError(`cannot run ${program}: ${ended.message}`, missing ? EXIT.notFound : EXIT.failure);
    }
    if (lock.signal.aborted) return EXIT.lost;
    return ended.code ?? 128 + constants.signals[ended.signal!];
  } finally {
    lock.signal.removeEventListener('abort', onLost);
    clearTimeout(killTimer);
    for (const signal of forwarded) process.off(signal, forward);
    await lock.release().catch((error: unknown) => warn(`releasing ${req.key}: ${describeError(error)}`));
  }
}

function warn(message: string): void {
  process.stderr.write(`deadbolt: ${message}\n`);
}
