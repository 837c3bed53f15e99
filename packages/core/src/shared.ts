import type { SharedRequest } from './backend.js';

/**
 * The grant rule of `SharedRequest`, for stores that evaluate it in JavaScript: may the claim at
 * `index` of a key's live claims (in arrival order) be granted? Stores that evaluate it inside the
 * store (a Lua script, a SQL statement) follow the same three lines.
 */
export function grantable(claims: ReadonlyArray<{ readonly mode: SharedRequest['mode'] }>, index: number, limit: number): boolean {
  if (claims[index]!.mode === 'exclusive') return index === 0;
  for (let i = 0; i < index; i++) if (claims[i]!.mode === 'exclusive') return false;
  return limit === 0 || index < limit;
}
