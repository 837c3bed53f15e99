// Exit codes (the BSD sysexits numbers where one fits), and the one-line report of a failure.
import { DeadboltError } from '@deadbolt/core';

/** What `deadbolt` exits with when the command it ran did not decide it. */
export const EXIT = {
  /** `check`: a behaviour failed on the store. */
  failed: 1,
  /** Bad flags, a missing key or command, an unknown scheme, an option the store refuses. */
  usage: 64,
  /** The store could not be reached, or did not answer in time. */
  unavailable: 69,
  /** The store refused or failed (`BackendError`), or anything else went wrong. */
  failure: 70,
  /** `-n` found the key held, or `-w` ran out (`-E` sets another code). */
  busy: 75,
  /** The lock was lost while the command ran; the command was stopped. */
  lost: 76,
  /** The command could not be started (not found, not executable), as a shell says. */
  notFound: 127,
} as const;

/** A failure the command line reports in one line and exits with `code`. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly code: number,
  ) {
    super(message);
  }
}

/** The exit code for an error of deadbolt's (or anything else: `failure`). */
export function exitCodeOf(error: unknown): number {
  if (error instanceof CliError) return error.code;
  if (!(error instanceof DeadboltError)) return EXIT.failure;
  switch (error.code) {
    case 'INVALID_ARGUMENT':
      return EXIT.usage;
    case 'LOCK_TIMEOUT':
      return EXIT.busy;
    case 'BACKEND_UNAVAILABLE':
      return EXIT.unavailable;
    case 'LOCK_LOST':
      return EXIT.lost;
    default:
      return EXIT.failure;
  }
}

/** One line for stderr: the error's message and, for a store failure, its cause's (never a stack). */
export function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = (error as { cause?: unknown }).cause;
  const more = cause instanceof Error && cause.message && !error.message.includes(cause.message) ? `: ${cause.message}` : '';
  return `${error.message}${more}`.replace(/\s*\n\s*/g, ' ');
}
