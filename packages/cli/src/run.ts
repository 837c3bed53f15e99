// `deadbolt run`: take the lock, run the command while holding it, give it back when the command
// and every process it started have ended. The command learns the key and its fencing token from
// its environment; signals sent to deadbolt are passed on to its whole process group; when the
// lock is lost, the group is stopped (SIGTERM, then SIGKILL after a grace period), as `consul lock`
// does for its child and `etcdctl lock` does not.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
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
  /** Say on stderr how long taking the lock took, and its token (flock's `--verbose`). */
  readonly verbose?: boolean;
}

/**
 * Signals passed on to the command's process group. SIGINT and SIGQUIT too: the command runs in a
 * session of its own, so a terminal's Ctrl-C reaches only deadbolt, which passes it on.
 */
const FORWARDED = ['SIGTERM', 'SIGHUP', 'SIGUSR1', 'SIGUSR2', 'SIGWINCH', 'SIGINT', 'SIGQUIT'] as const;
/** Signals that stop a wait for the lock (deadbolt then exits as if killed by them). */
const INTERRUPTS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
/** How often deadbolt looks whether any process of the command is left, once its first one ended. */
const GROUP_POLL_MS = 50;

/** Runs `req`; resolves the exit code. @throws CliError, or deadbolt's errors (the caller maps them to exit codes). */
export async function run(req: RunRequest): Promise<number> {
  const locker = createLocker(await backendFor(req.url), req.ttlMs === undefined ? {} : { ttlMs: req.ttlMs });
  try {
    const started = performance.now();
    const lock = await take(locker, req);
    if (req.verbose) {
      const seconds = ((performance.now() - started) / 1000).toFixed(3);
      process.stderr.write(`deadbolt: took ${req.key} in ${seconds} s, fencing token ${lock.token}\n`);
    }
    return await holding(lock, req, { DEADBOLT_OWNER: lock.owner });
  } finally {
    await locker.close().catch((error: unknown) => warn(`closing the store's connections: ${describeError(error)}`));
  }
}

/** The lock, or a CliError with the conflict code; a signal meanwhile ends the wait (exit 128 + its number). */
function take(locker: Locker, req: RunRequest): Promise<Lock> {
  const { kind, key, nonblock } = req;
  return waitFor(req, (options) => {
    if (kind.type === 'permit') {
      const semaphore = locker.semaphore(key, { limit: kind.limit });
      return nonblock ? semaphore.tryAcquire(options) : semaphore.acquire(options);
    }
    if (kind.type === 'read') return nonblock ? locker.readWriteLock(key).tryRead(options) : locker.readWriteLock(key).read(options);
    if (kind.type === 'write') return nonblock ? locker.readWriteLock(key).tryWrite(options) : locker.readWriteLock(key).write(options);
    return nonblock ? locker.tryLock(key, options) : locker.lock(key, options);
  });
}

/** How long a wait may last, and what a wait that comes to nothing exits with. */
export type WaitTerms = Pick<RunRequest, 'key' | 'nonblock' | 'timeoutMs' | 'conflictCode'>;

/**
 * What `attempt` gets (given the wait's signal and, unless one attempt, its timeout), or a
 * CliError with the conflict code when it gets nothing or times out; a signal meanwhile ends the
 * wait (exit 128 + its number).
 */
export async function waitFor<T>(
  req: WaitTerms,
  attempt: (options: { signal: AbortSignal; timeoutMs?: number }) => Promise<T | null>,
): Promise<T> {
  const interrupted = new AbortController();
  const onSignal = (signal: NodeJS.Signals) =>
    interrupted.abort(new CliError(`interrupted by ${signal} while waiting for ${req.key}`, 128 + constants.signals[signal]));
  for (const signal of INTERRUPTS) process.on(signal, onSignal);
  try {
    let got: T | null;
    try {
      got = await attempt({ signal: interrupted.signal, ...(req.nonblock ? {} : { timeoutMs: req.timeoutMs }) });
    } catch (error) {
      if ((error as { code?: string }).code !== 'LOCK_TIMEOUT') throw error;
      throw new CliError(`${req.key} is still held after ${req.timeoutMs / 1000} s`, req.conflictCode);
    }
    if (got === null) throw new CliError(`${req.key} is held`, req.conflictCode);
    return got;
  } finally {
    for (const signal of INTERRUPTS) process.off(signal, onSignal);
  }
}

/**
 * Runs the command under `lock` (a lock, or an election's term), then releases it. Resolves the
 * command's exit code, or EXIT.lost. Its environment has DEADBOLT_KEY, DEADBOLT_TOKEN and `env`.
 *
 * The command starts as the leader of a process group (and session) of its own, and everything
 * it starts stays in that group unless it leaves on purpose (`setsid`, `setpgid`: a daemon that
 * detaches itself). Signals go to the whole group, and the lock is held, and renewed, until every
 * process of the group is gone, not only the command itself: a shell's child (`-c 'a; b &'`, a
 * pipeline) keeps the lock while it runs, and is stopped with the rest when the lock is lost.
 */
export async function holding(
  lock: Pick<Lock, 'token' | 'signal' | 'release'>,
  req: Pick<RunRequest, 'key' | 'command' | 'graceMs'>,
  env: Readonly<Record<string, string>>,
): Promise<number> {
  const [program, ...args] = req.command;
  const child = spawn(program!, args, {
    stdio: 'inherit',
    detached: true,
    env: { ...process.env, DEADBOLT_KEY: req.key, DEADBOLT_TOKEN: lock.token.toString(), ...env },
  });
  const group = child.pid;
  const signalGroup = (signal: NodeJS.Signals) => {
    if (group === undefined) return;
    try {
      process.kill(-group, signal);
    } catch {
      // ESRCH: nobody left in the group.
    }
  };
  const forward = (signal: NodeJS.Signals) => signalGroup(signal);
  for (const signal of FORWARDED) process.on(signal, forward);
  let killTimer: NodeJS.Timeout | undefined;
  const onLost = () => {
    warn(
      `lost the lock on ${req.key} (${describeError(lock.signal.reason)}); stopping the command and every process it started: SIGTERM, SIGKILL in ${req.graceMs / 1000} s`,
    );
    signalGroup('SIGTERM');
    killTimer = setTimeout(() => signalGroup('SIGKILL'), req.graceMs);
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
    // The command's own process is gone; what it started may not be. The lock stays held (and a
    // loss still stops them) until the last of them has ended.
    if (group !== undefined) while (groupAlive(group)) await new Promise((resolve) => setTimeout(resolve, GROUP_POLL_MS));
    if (lock.signal.aborted) return EXIT.lost;
    return ended.code ?? 128 + constants.signals[ended.signal!];
  } finally {
    lock.signal.removeEventListener('abort', onLost);
    clearTimeout(killTimer);
    for (const signal of FORWARDED) process.off(signal, forward);
    await lock.release().catch((error: unknown) => warn(`releasing ${req.key}: ${describeError(error)}`));
  }
}

/**
 * Whether any process of the group `pgid` is still running. On Linux, read from /proc, so that a
 * process that has ended but not been reaped yet (a zombie, whose parent has not waited for it)
 * does not count; elsewhere, whether the group can be signalled at all.
 */
function groupAlive(pgid: number): boolean {
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((name) => /^\d+$/.test(name));
  } catch {
    try {
      process.kill(-pgid, 0);
      return true;
    } catch (error) {
      return (error as NodeJS.ErrnoException).code === 'EPERM';
    }
  }
  for (const pid of pids) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // ended meanwhile
    }
    // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses, so count from the last `)`.
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(pgrp) === pgid && state !== 'Z' && state !== 'X') return true;
  }
  return false;
}

function warn(message: string): void {
  process.stderr.write(`deadbolt: ${message}\n`);
}
