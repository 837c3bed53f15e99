// `deadbolt inspect`: who holds a key and who waits, as text or JSON.
import { createLocker, type ClaimInfo, type Inspection } from '@deadbolt/core';
import { backendFor } from './stores.js';

export interface InspectRequest {
  readonly url: string;
  readonly key: string;
  /** The shared namespace (semaphores and read-write locks) instead of the plain lock's. */
  readonly shared: boolean;
  /** How long the store may take to answer (core's `operationTimeoutMs`, the connect included). */
  readonly timeoutMs: number;
}

/**
 * What the store holds for the key. @throws deadbolt's errors (the caller maps them to exit codes):
 * BackendUnavailableError when the store gave no answer within `timeoutMs`.
 */
export async function inspect(req: InspectRequest): Promise<Inspection> {
  const locker = createLocker(await backendFor(req.url), { operationTimeoutMs: req.timeoutMs });
  try {
    // Semaphores and read-write locks share one namespace, and one inspection of it.
    return await (req.shared ? locker.readWriteLock(req.key).inspect() : locker.inspect(req.key));
  } finally {
    await locker.close().catch(() => undefined);
  }
}

/** `seen` as JSON, tokens as decimal strings (JSON has no 64-bit integers). */
export function asJson(seen: Inspection): string {
  return JSON.stringify(seen, (_, value: unknown) => (typeof value === 'bigint' ? value.toString() : value), 2);
}

/** `seen` for a person: the holders, then the waiters in queue order, a field the store cannot know as "?". */
export function asText(seen: Inspection): string {
  const claim = (c: ClaimInfo) =>
    [
      c.owner ?? '?',
      c.mode ?? '',
      c.token === null ? '' : `token ${c.token}`,
      c.ttlLeftMs === null ? 'session' : `${(c.ttlLeftMs / 1000).toFixed(1)} s left`,
    ]
      .filter(Boolean)
      .join('  ');
  const lines = [
    `${seen.key}: ${seen.holders.length === 0 ? 'free' : `held by ${seen.holders.length}`}${seen.limit ? ` (limit ${seen.limit})` : ''}`,
  ];
  for (const h of seen.holders) lines.push(`  holder  ${claim(h)}`);
  if (seen.waiters === null) lines.push('  waiters: not visible in this store');
  else seen.waiters.forEach((w, i) => lines.push(`  ${String(i + 1).padStart(6)}. ${claim(w)}`));
  return lines.join('\n');
}
