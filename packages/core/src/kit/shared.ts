import type { Claim, StoreView } from './backend.js';
import type { ClaimInfo } from '../api/types.js';

/**
 * The grant rule of a shared key (`Claim`), for stores that evaluate it in JavaScript: may the claim at
 * `index` of a key's live claims (in arrival order) be granted? Stores that evaluate it inside the
 * store (a Lua script, a SQL statement) follow the same three lines.
 */
export function grantable(claims: ReadonlyArray<{ readonly mode: Claim['mode'] }>, index: number, limit: number): boolean {
  let exclusiveAhead = 0;
  for (let i = 0; i < index; i++) if (claims[i]!.mode === 'exclusive') exclusiveAhead++;
  return grantableBehind(claims[index]!.mode, index, exclusiveAhead, limit);
}

/** The same rule from counts alone, for a store that counted the live claims ahead of ours (and how many of them are exclusive) rather than reading them. */
export function grantableBehind(mode: Claim['mode'], ahead: number, exclusiveAhead: number, limit: number): boolean {
  if (mode === 'exclusive') return ahead === 0;
  return exclusiveAhead === 0 && (limit === 0 || ahead < limit);
}

/**
 * `LockBackend.inspect` for a shared key whose live claims (in arrival order) a store read: those
 * the grant rule lets hold are the holders (a claim granted by the rule holds the key even before
 * its waiter has heard), the rest wait in that order. `limit`: the stored one, absent with no
 * claims. `waiterTokens`: whether a waiting claim's token is final (taken at arrival); where the
 * grant adds to it (a raised floor), waiters show none.
 */
export function sharedView(
  claims: ReadonlyArray<ClaimInfo & { readonly mode: Claim['mode'] }>,
  limit: number | undefined,
  waiterTokens: boolean,
): StoreView {
  const held = claims.map((_, i) => limit !== undefined && grantable(claims, i, limit));
  return {
    holders: claims.filter((_, i) => held[i]),
    waiters: claims.filter((_, i) => !held[i]).map((c) => (waiterTokens ? c : { ...c, token: null })),
    ...(claims.length > 0 && limit !== undefined ? { limit } : {}),
  };
}

/**
 * A claim as the SQL stores' inspection statements give it: `owner`, `token` (null: none given
 * yet) and `left_ms` (absent for a session lease, which has no time left on the store's clock).
 */
export function claimOfRow(row: Readonly<Record<string, unknown>>): ClaimInfo {
  const { owner, token, left_ms: left } = row;
  return {
    owner: String(owner),
    token: token === null || token === undefined ? null : BigInt(token as string | number),
    ttlLeftMs: left === null || left === undefined ? null : Math.max(0, Number(left)),
  };
}

/** `sharedView` of the SQL stores' shared-claim rows: in queue order, each with `exclusive` and the key's `claim_limit`. */
export function sharedViewOfRows(rows: ReadonlyArray<Readonly<Record<string, unknown>>>): StoreView {
  const claims = rows.map((r) => ({ ...claimOfRow(r), mode: r['exclusive'] ? ('exclusive' as const) : ('shared' as const) }));
  return sharedView(claims, rows[0] && Number(rows[0]['claim_limit']), true);
}
