import type { Capabilities } from '../kit/backend.js';
import { InvalidArgumentError } from './errors.js';
import { describe } from '../kit/options.js';

/** Longest key every backend must accept, in UTF-8 bytes. */
export const MAX_KEY_BYTES = 1024;

/**
 * @throws InvalidArgumentError unless `key` is a non-empty, well-formed string (no lone UTF-16
 * surrogate) of at most 1024 UTF-8 bytes. Every store sees a key as its UTF-8 bytes, where a lone
 * surrogate becomes U+FFFD: `'x\uD800'`, `'x\uDC00'` and `'x\uFFFD'` would be one lock there while
 * this process took them for three (and `lockAll` of two of them would wait for itself).
 */
export function validateKey(key: unknown, name = 'key'): asserts key is string {
  if (typeof key !== 'string') throw new InvalidArgumentError(`${name} must be a string, got ${typeof key}`);
  if (key.length === 0) throw new InvalidArgumentError(`${name} must not be empty`);
  if (!key.isWellFormed())
    throw new InvalidArgumentError(
      `${name} must be well-formed Unicode: it holds a lone UTF-16 surrogate, which stores cannot tell from U+FFFD`,
    );
  // A UTF-16 code unit is at most 3 UTF-8 bytes: only a long key needs counting.
  if (key.length <= MAX_KEY_BYTES / 3) return;
  const bytes = Buffer.byteLength(key, 'utf8');
  if (bytes > MAX_KEY_BYTES) {
    throw new InvalidArgumentError(`${name} must be at most ${MAX_KEY_BYTES} UTF-8 bytes, got ${bytes}`);
  }
}

/**
 * @throws InvalidArgumentError unless `ttlMs` is a safe integer between the backend's minimum and
 * maximum and a whole multiple of its granularity.
 */
export function validateTtl(ttlMs: unknown, caps: Required<Capabilities>, name = 'ttlMs'): number {
  if (typeof ttlMs !== 'number' || !Number.isSafeInteger(ttlMs) || ttlMs <= 0) {
    throw new InvalidArgumentError(`${name} must be a positive safe integer (milliseconds), got ${describe(ttlMs)}`);
  }
  if (ttlMs < caps.minTtlMs) {
    throw new InvalidArgumentError(`${name} must be at least ${caps.minTtlMs} ms on this backend, got ${ttlMs}`);
  }
  const max = caps.maxTtlMs;
  if (ttlMs > max) throw new InvalidArgumentError(`${name} must be at most ${max} ms on this backend, got ${ttlMs}`);
  if (ttlMs % caps.ttlGranularityMs !== 0) {
    throw new InvalidArgumentError(`${name} must be a multiple of ${caps.ttlGranularityMs} ms on this backend, got ${ttlMs}`);
  }
  return ttlMs;
}

/** Most keys one `lockAll` / `tryLockAll` takes. */
export const MAX_LOCK_ALL_KEYS = 256;

/**
 * The keys of a `lockAll`, de-duplicated and in the canonical order every caller takes them in
 * (JavaScript string order, the same in every process), so two callers never wait for each other
 * in a cycle. @throws InvalidArgumentError unless `keys` is an array of 1..MAX_LOCK_ALL_KEYS valid keys.
 */
export function validateKeys(keys: unknown): string[] {
  if (!Array.isArray(keys)) throw new InvalidArgumentError(`keys must be an array of keys, got ${describe(keys)}`);
  if (keys.length === 0) throw new InvalidArgumentError('keys must not be empty');
  if (keys.length > MAX_LOCK_ALL_KEYS) throw new InvalidArgumentError(`at most ${MAX_LOCK_ALL_KEYS} keys at once, got ${keys.length}`);
  for (const key of keys) validateKey(key);
  return [...new Set(keys as string[])].sort();
}
