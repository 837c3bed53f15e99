// `deadbolt elect`, `deadbolt leader` and `deadbolt observe`: an election of the store at a URL,
// its leader's value published in the store's own fence. `elect` runs a command while this
// process leads, as `deadbolt run` runs one while it holds a lock (run.ts), and stops it the same
// way when the term is lost.
import { createLocker, type Leader, type LeaderChange, type Locker } from '@deadbolt/core';
import { describeError, EXIT } from './exit.js';
import { holding, waitFor, type WaitTerms } from './run.js';
import { backendFor, fenceFor } from './stores.js';

export interface ElectRequest extends WaitTerms {
  readonly url: string;
  /** What this process publishes while it leads. */
  readonly value: string;
  readonly command: readonly string[];
  readonly ttlMs: number | undefined;
  readonly graceMs: number;
  /** After a lost term, campaign again and run the command again. */
  readonly again: boolean;
}

/** A locker of the store at `url` with its fence, for `use`; both closed after it. */
async function withElections<T>(url: string, ttlMs: number | undefined, use: (locker: Locker) => Promise<T>): Promise<T> {
  const fence = await fenceFor(url);
  const locker = createLocker(await backendFor(url), { fence, ...(ttlMs === undefined ? {} : { ttlMs }) });
  try {
    return await use(locker);
  } finally {
    await locker.close().catch((error: unknown) => warn(`closing the store's connections: ${describeError(error)}`));
    await fence.close();
  }
}

/** Runs `req`; resolves the exit code. @throws CliError, or deadbolt's errors (the caller maps them to exit codes). */
export function elect(req: ElectRequest): Promise<number> {
  return withElections(req.url, req.ttlMs, async (locker) => {
    for (;;) {
      const term = await waitFor(req, (options) =>
        req.nonblock ? locker.tryElect(req.key, { value: req.value, ...options }) : locker.elect(req.key, { value: req.value, ...options }),
      );
      const release = () => term.resign();
      const code = await holding({ token: term.token, signal: term.signal, release }, req, { DEADBOLT_TERM: String(term.term) });
      if (code !== EXIT.lost || !req.again) return code;
      warn(`campaigning again for ${req.key}`);
    }
  });
}

/** `deadbolt leader`: who leads election `name` now, or null. */
export function leader(url: string, name: string): Promise<Leader | null> {
  return withElections(url, undefined, (locker) => locker.leader(name));
}

/** `deadbolt observe`: `print` each change of election `name`'s leader until `signal` aborts. */
export function observe(
  url: string,
  name: string,
  intervalMs: number,
  signal: AbortSignal,
  print: (change: LeaderChange) => void,
): Promise<void> {
  return withElections(url, undefined, async (locker) => {
    for await (const change of locker.observe(name, { intervalMs, signal })) print(change);
  });
}

/** A leader as one line of text. */
export function leaderText(name: string, now: Leader | null): string {
  if (!now) return `nobody leads ${name}`;
  if (now.value === null) return `${name}: a new leader (token ${now.token}) has not published its value yet`;
  return `${name}: ${now.value} (term ${now.term}, token ${now.token}, for ${((now.sinceMs ?? 0) / 1000).toFixed(1)} s)`;
}

/** A leader as JSON (tokens as decimal strings). */
export function leaderJson(now: Leader | null): string {
  return JSON.stringify(now && { ...now, token: now.token === null ? null : String(now.token) });
}

function warn(message: string): void {
  process.stderr.write(`deadbolt: ${message}\n`);
}
