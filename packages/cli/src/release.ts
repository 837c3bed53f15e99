// `deadbolt release KEY --force`: frees a lock someone else holds (a holder that is stuck, a job
// that hangs), after the operator confirms. The store checks the owner itself (Locker.forceRelease):
// if another holder took the key meanwhile, nothing of theirs is freed.
import { createInterface } from 'node:readline/promises';
import { createLocker, type ClaimInfo } from '@deadbolt/core';
import { CliError, EXIT } from './exit.js';
import { backendFor } from './stores.js';

export interface ReleaseRequest {
  readonly url: string;
  readonly key: string;
  /** The semaphore's or read-write lock's namespace, as `inspect -s`. */
  readonly shared: boolean;
  /** The holder to free; the current one when absent (there must be exactly one). */
  readonly owner: string | undefined;
  /** Confirmed on the command line (--yes); otherwise asked on a terminal. */
  readonly yes: boolean;
  /** How long the store may take to answer each request (core's `operationTimeoutMs`). */
  readonly timeoutMs: number;
}

/**
 * Frees the holder's claim; resolves the exit code (0 freed, `EXIT.failed` when there was nothing
 * of that owner's to free). @throws CliError (64) when the holder is ambiguous or the operator did
 * not confirm; deadbolt's errors (a store that cannot free another client's lock: InvalidArgumentError).
 */
export async function release(req: ReleaseRequest): Promise<number> {
  const locker = createLocker(await backendFor(req.url), { operationTimeoutMs: req.timeoutMs });
  try {
    const seen = await (req.shared ? locker.readWriteLock(req.key).inspect() : locker.inspect(req.key));
    const holder = pick(seen.holders, req);
    if (!holder) {
      process.stdout.write(`${req.key}: ${req.owner ?? 'nobody'} holds nothing to free\n`);
      return EXIT.failed;
    }
    const who = `${holder.owner}${holder.token === null ? '' : ` (token ${holder.token})`}`;
    if (!req.yes && !(await confirmed(`free ${req.key}, held by ${who}? It keeps running until it notices. [y/N] `)))
      throw new CliError('not freed: confirm with --yes (or answer y on a terminal)', EXIT.usage);
    const freed = await locker.forceRelease(req.key, holder.owner!, { shared: req.shared });
    process.stdout.write(freed ? `${req.key}: freed ${who}\n` : `${req.key}: ${holder.owner} no longer held it: nothing freed\n`);
    return freed ? 0 : EXIT.failed;
  } finally {
    await locker.close().catch(() => undefined);
  }
}

/** The holder to free: the one named, or the only one. */
function pick(holders: readonly ClaimInfo[], req: ReleaseRequest): ClaimInfo | undefined {
  if (req.owner !== undefined) return holders.find((h) => h.owner === req.owner);
  if (holders.length > 1)
    throw new CliError(
      `${req.key} has ${holders.length} holders: name one with --owner (${holders.map((h) => h.owner).join(', ')})`,
      EXIT.usage,
    );
  const [only] = holders;
  if (only && only.owner === null)
    throw new CliError(`${req.key}'s holder is not known to the store by its owner id: nothing can be freed`, EXIT.usage);
  return only;
}

/** Asks on the terminal; false when stdin is not one. */
async function confirmed(question: string): Promise<boolean> {
  if (!process.stdin.isTTY) return false;
  const prompt = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return /^y(es)?$/i.test((await prompt.question(question)).trim());
  } finally {
    prompt.close();
  }
}
