/**
 * A history of what lock clients did and saw, and the checker that judges it afterwards: the
 * Jepsen approach (record every operation's invocation and completion on one clock, then check the
 * whole history against what the lock promises) for runs with faults, where a test cannot know in
 * advance which outcome is right but every outcome must be consistent.
 *
 * Events are on one monotonic clock for every process of the machine (`process.hrtime`, in ms), so
 * workers in child processes can be merged into one history. What each worker logs:
 * - `acquire` invoke, then ok (with the token) / fail / unknown (a timeout: it may or may not have
 *   been granted; the worker does not act as a holder);
 * - `held` whenever it checks that it still holds the lock before acting (`lock.held` true), and
 *   `lost` when it finds it lost (`lock.signal` aborted, or `held` false);
 * - `write` invoke, then ok / fail (with the error's code) / unknown, of a write carrying its token;
 * - `release` invoke, then ok / fail / unknown;
 * - `heal` (no process) when a fault ends, for the liveness check.
 *
 * A hold is "believed" from its acquire's ok to the worker's last sign that it still held it (its
 * last `held` check, or its release's invocation when it had not seen a loss). A holder that was
 * paused believes nothing while it is stopped, and checks before it acts again: a lease cannot stop
 * a paused process, but it can make sure the process knows before it acts, and that is what this
 * judges. A write does not extend the belief: one decided before a pause may be sent after it,
 * and refusing such writes is the fence's job (judged by the write checks). Operations with an
 * unknown outcome are open intervals: they may have taken effect at any time after their
 * invocation.
 *
 * Pure TypeScript without the test runner, so a cluster run or a CLI can use it.
 */

/** What a worker did or saw. */
export type HistoryOp = 'acquire' | 'release' | 'held' | 'lost' | 'write' | 'heal';
/** invoke: started; ok / fail: finished with that outcome; unknown: no answer (timed out); info: an observation. */
export type HistoryType = 'invoke' | 'ok' | 'fail' | 'unknown' | 'info';

/** One step of a history: an invocation, its completion (`ok`, `fail`, or `unknown` when the outcome cannot be known), or a note (`held`, `lost`, `heal`). */
export interface HistoryEvent {
  /** The worker (several workers may share a process). */
  readonly process: string;
  readonly op: HistoryOp;
  readonly type: HistoryType;
  /** ms on the machine's monotonic clock. */
  readonly time: number;
  readonly key: string;
  /** Which invocation a completion completes (the invoke's `id`). */
  readonly id: number;
  readonly token?: bigint;
  /** A write's resource. */
  readonly resource?: string;
  /** A failure's error code (`STALE_TOKEN`, `LOCK_TIMEOUT`, …). */
  readonly code?: string;
  /** An acquire's mode: `shared` for a read lock; exclusive when absent. */
  readonly mode?: 'exclusive' | 'shared';
}

/** How holds of a key may overlap: a mutex, a semaphore of `limit`, or a read-write lock (mode per hold). */
export interface KeyModel {
  readonly kind: 'mutex' | 'semaphore' | 'read-write';
  readonly limit?: number;
}

/** The machine's monotonic clock in ms (one for every process, unlike `performance.now()`). */
export const monotonicMs = (): number => Number(process.hrtime.bigint()) / 1e6;

/** Records events; each worker gets a `Worker` that tags its events. Events can be merged from several processes. */
export class HistoryRecorder {
  readonly events: HistoryEvent[] = [];
  #nextId = 1;

  constructor(
    /** The time of each event, in ms (default the machine's monotonic clock). */
    readonly clock: () => number = monotonicMs,
  ) {}

  /** Adds one event; `id` 0 for an invocation takes a fresh one. Returns its id. */
  add(event: Omit<HistoryEvent, 'time' | 'id'> & { id?: number }): number {
    const id = event.id ?? (event.type === 'invoke' ? this.#nextId++ : 0);
    this.events.push({ ...event, id, time: this.clock() });
    return id;
  }

  /** Events recorded elsewhere (a child process's), with ids moved out of this recorder's range. */
  merge(events: readonly HistoryEvent[]): void {
    const offset = this.#nextId;
    let top = 0;
    for (const e of events) {
      this.events.push({ ...e, id: e.id === 0 ? 0 : e.id + offset });
      top = Math.max(top, e.id);
    }
    this.#nextId += top + 1;
  }

  /** A worker whose events carry `process` as their worker's name. */
  worker(process: string): HistoryWorker {
    return new HistoryWorker(this, process);
  }
}

/** One worker's view of the recorder. */
export class HistoryWorker {
  constructor(
    readonly recorder: HistoryRecorder,
    readonly process: string,
  ) {}

  /** Records the start of `op` on `key`; returns the id its completion names. */
  invoke(op: 'acquire' | 'release' | 'write', key: string, more: { token?: bigint; resource?: string } = {}): number {
    return this.recorder.add({ process: this.process, op, type: 'invoke', key, ...more });
  }

  /** Records how the invocation `id` ended. */
  complete(
    id: number,
    op: 'acquire' | 'release' | 'write',
    key: string,
    type: 'ok' | 'fail' | 'unknown',
    more: { token?: bigint; resource?: string; code?: string; mode?: 'exclusive' | 'shared' } = {},
  ): void {
    this.recorder.add({ process: this.process, op, type, key, id, ...more });
  }

  /** The worker saw it still holds `key` (under `token`) and is about to act. */
  held(key: string, token: bigint): void {
    this.recorder.add({ process: this.process, op: 'held', type: 'info', key, token, id: 0 });
  }

  /** The worker saw its hold of `key` lost. */
  lost(key: string, token: bigint): void {
    this.recorder.add({ process: this.process, op: 'lost', type: 'info', key, token, id: 0 });
  }
}

/** One hold as the history shows it. */
export interface Hold {
  readonly process: string;
  readonly key: string;
  readonly token: bigint;
  readonly mode: 'exclusive' | 'shared';
  /** When the acquire was invoked and answered. */
  readonly invoked: number;
  readonly granted: number;
  /** The holder's last check that it held (or its release's invocation). */
  readonly believedUntil: number;
}

/** Options of `checkHistory`. */
export interface CheckOptions {
  /** The model of each key (default: every key a mutex). */
  model?: (key: string) => KeyModel;
  /** After a `heal` event, how long a waiter may still wait before it counts as never granted. Default 30 000 ms. */
  livenessGraceMs?: number;
}

/** What `checkHistory` found: each kind of anomaly, and whether there was none. */
export interface HistoryCheck {
  /** No anomaly of any kind. */
  readonly valid: boolean;
  readonly holds: number;
  /** Pairs (or groups beyond a limit) of believed holds at one instant that the key's model forbids. */
  readonly overlaps: { key: string; holds: Hold[]; at: number }[];
  /** Two holds of one key with one token, or a hold granted after another was granted yet with a token not above it. */
  readonly tokenAnomalies: { key: string; earlier: Hold; later: Hold; why: 'duplicate' | 'not increasing' }[];
  /** Writes a resource accepted after it had accepted a higher token. */
  readonly staleWrites: { resource: string; token: bigint; after: bigint; at: number }[];
  /** Writes refused as stale though no higher token could have been written before. */
  readonly wrongRefusals: { resource: string; token: bigint; at: number }[];
  /** Acquires still unanswered `livenessGraceMs` after the last heal (or after they started, if later). */
  readonly neverGranted: { key: string; process: string; invoked: number }[];
  /** Per key: the longest time someone was waiting while nobody held it. */
  readonly longestUnavailableMs: number;
}

/** Judges a history (see the file's opening comment). */
export function checkHistory(events: readonly HistoryEvent[], options: CheckOptions = {}): HistoryCheck {
  const sorted = [...events].sort((a, b) => a.time - b.time);
  const end = sorted.at(-1)?.time ?? 0;
  const model = options.model ?? (() => ({ kind: 'mutex' }) as KeyModel);
  const holds = holdsOf(sorted, end);
  const byKey = groupBy(holds, (h) => h.key);
  const overlaps: HistoryCheck['overlaps'] = [];
  const tokenAnomalies: HistoryCheck['tokenAnomalies'] = [];
  for (const [key, list] of byKey) {
    overlaps.push(...overlapsOf(key, list, model(key)));
    tokenAnomalies.push(...tokenAnomaliesOf(key, list));
  }
  const { stale, wrong } = writeAnomalies(sorted);
  const heal = Math.max(-Infinity, ...sorted.filter((e) => e.op === 'heal').map((e) => e.time));
  const grace = options.livenessGraceMs ?? 30_000;
  const neverGranted = pendingAcquires(sorted)
    .filter((e) => end - Math.max(e.time, heal) > grace)
    .map((e) => ({ key: e.key, process: e.process, invoked: e.time }));
  const result = {
    holds: holds.length,
    overlaps,
    tokenAnomalies,
    staleWrites: stale,
    wrongRefusals: wrong,
    neverGranted,
    longestUnavailableMs: longestUnavailable(sorted, byKey, end),
  };
  const valid = !overlaps.length && !tokenAnomalies.length && !stale.length && !wrong.length && !neverGranted.length;
  return { valid, ...result };
}

function groupBy<T>(items: readonly T[], by: (item: T) => string): Map<string, T[]> {
  const map = new Map<string, T[]>();
  for (const item of items) {
    const k = by(item);
    const list = map.get(k);
    if (list) list.push(item);
    else map.set(k, [item]);
  }
  return map;
}

/** Every granted acquire as a hold, believed until its holder's last sign of belief. */
function holdsOf(sorted: readonly HistoryEvent[], end: number): Hold[] {
  const invokes = new Map<number, HistoryEvent>();
  type Open = { invoked: number; granted: number; token: bigint; last: number; key: string; process: string; mode: Hold['mode'] };
  const open = new Map<string, Open>();
  const done: Hold[] = [];
  const close = (slot: string) => {
    const h = open.get(slot);
    if (!h) return;
    open.delete(slot);
    done.push({
      process: h.process,
      key: h.key,
      token: h.token,
      mode: h.mode,
      invoked: h.invoked,
      granted: h.granted,
      believedUntil: h.last,
    });
  };
  for (const e of sorted) {
    const slot = `${e.process}\n${e.key}`;
    if (e.type === 'invoke') invokes.set(e.id, e);
    if (e.op === 'acquire' && e.type === 'ok' && e.token !== undefined) {
      close(slot);
      const invoked = invokes.get(e.id)?.time ?? e.time;
      open.set(slot, {
        invoked,
        granted: e.time,
        token: e.token,
        last: e.time,
        key: e.key,
        process: e.process,
        mode: e.mode ?? 'exclusive',
      });
    } else if (e.op === 'held' || (e.op === 'release' && e.type === 'invoke')) {
      const h = open.get(slot);
      if (h && (e.token === undefined || e.token === h.token)) h.last = e.time;
      if (e.op === 'release') close(slot);
    } else if (e.op === 'lost') {
      close(slot);
    }
  }
  for (const slot of [...open.keys()]) {
    const h = open.get(slot)!;
    h.last = Math.max(h.last, end); // still held when the history ends: believed to the end
    close(slot);
  }
  return done;
}

/** Instants where more holds were believed at once than the key's model allows. */
function overlapsOf(key: string, holds: readonly Hold[], model: KeyModel): HistoryCheck['overlaps'] {
  const found: HistoryCheck['overlaps'] = [];
  // Sweep over starts and ends; an end at the same instant as a start comes first (a handoff).
  const points = holds.flatMap((h) => [
    { at: h.granted, start: true, h },
    { at: h.believedUntil, start: false, h },
  ]);
  points.sort((a, b) => a.at - b.at || Number(a.start) - Number(b.start));
  const live = new Set<Hold>();
  for (const p of points) {
    if (!p.start) {
      live.delete(p.h);
      continue;
    }
    live.add(p.h);
    const now = [...live];
    const exclusive = now.filter((h) => h.mode === 'exclusive');
    const bad =
      model.kind === 'mutex'
        ? now.length > 1
        : model.kind === 'semaphore'
          ? now.length > (model.limit ?? 1)
          : exclusive.length > 0 && now.length > 1;
    if (bad) found.push({ key, holds: now, at: p.at });
  }
  return found;
}

/** Tokens must be unique per key and rise in real time: a hold granted before another was asked for has the lower token. */
function tokenAnomaliesOf(key: string, holds: readonly Hold[]): HistoryCheck['tokenAnomalies'] {
  const found: HistoryCheck['tokenAnomalies'] = [];
  const byToken = groupBy(holds, (h) => h.token.toString());
  for (const same of byToken.values()) {
    for (let i = 1; i < same.length; i++) found.push({ key, earlier: same[0]!, later: same[i]!, why: 'duplicate' });
  }
  const byGrant = [...holds].sort((a, b) => a.granted - b.granted);
  // The highest token among holds granted before each instant, by binary search over grant times.
  const highest: Hold[] = [];
  for (const h of byGrant) highest.push(highest.length && highest.at(-1)!.token > h.token ? highest.at(-1)! : h);
  for (const later of holds) {
    let lo = 0;
    let hi = byGrant.length; // first hold granted at or after later.invoked
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (byGrant[mid]!.granted < later.invoked) lo = mid + 1;
      else hi = mid;
    }
    const earlier = lo > 0 ? highest[lo - 1]! : undefined;
    if (earlier && earlier.token > later.token) {
      found.push({ key, earlier, later, why: 'not increasing' });
    }
  }
  return found;
}

/**
 * Per resource: an accepted write whose token is below one the resource had accepted before the
 * write was sent is stale; a write refused as stale when no higher token had even been sent
 * before its answer is wrongly refused. Unknown writes may have landed: they only excuse refusals.
 */
function writeAnomalies(sorted: readonly HistoryEvent[]): { stale: HistoryCheck['staleWrites']; wrong: HistoryCheck['wrongRefusals'] } {
  const stale: HistoryCheck['staleWrites'] = [];
  const wrong: HistoryCheck['wrongRefusals'] = [];
  const invokes = new Map<number, HistoryEvent>();
  const acceptedHighest = new Map<string, bigint>();
  const sentHighest = new Map<string, bigint>();
  // Accepted writes take effect somewhere between invoke and ok: judge each against the writes
  // accepted (ok) before it was sent.
  const acceptedBefore = new Map<number, bigint | undefined>();
  for (const e of sorted) {
    if (e.op !== 'write' || e.resource === undefined || e.token === undefined) continue;
    if (e.type === 'invoke') {
      invokes.set(e.id, e);
      acceptedBefore.set(e.id, acceptedHighest.get(e.resource));
      const sent = sentHighest.get(e.resource);
      if (sent === undefined || e.token > sent) sentHighest.set(e.resource, e.token);
      continue;
    }
    if (e.type === 'ok') {
      const before = acceptedBefore.get(e.id);
      if (before !== undefined && e.token < before) stale.push({ resource: e.resource, token: e.token, after: before, at: e.time });
      const top = acceptedHighest.get(e.resource);
      if (top === undefined || e.token > top) acceptedHighest.set(e.resource, e.token);
    } else if (e.type === 'fail' && e.code === 'STALE_TOKEN') {
      const sent = sentHighest.get(e.resource);
      if (sent === undefined || sent <= e.token) wrong.push({ resource: e.resource, token: e.token, at: e.time });
    }
  }
  return { stale, wrong };
}

/** Acquire invocations that never completed. */
function pendingAcquires(sorted: readonly HistoryEvent[]): HistoryEvent[] {
  const pending = new Map<number, HistoryEvent>();
  for (const e of sorted) {
    if (e.op !== 'acquire') continue;
    if (e.type === 'invoke') pending.set(e.id, e);
    else pending.delete(e.id);
  }
  return [...pending.values()];
}

/** The longest stretch, on any key, during which someone waited and nobody was believed to hold it. */
function longestUnavailable(sorted: readonly HistoryEvent[], byKey: Map<string, Hold[]>, end: number): number {
  // Waiting intervals per key: acquire invoke → its completion (or the end).
  const waits = new Map<string, [number, number][]>();
  const started = new Map<number, HistoryEvent>();
  for (const e of sorted) {
    if (e.op !== 'acquire') continue;
    if (e.type === 'invoke') started.set(e.id, e);
    else if (started.has(e.id)) {
      const s = started.get(e.id)!;
      started.delete(e.id);
      (waits.get(s.key) ?? waits.set(s.key, []).get(s.key)!).push([s.time, e.time]);
    }
  }
  for (const s of started.values()) (waits.get(s.key) ?? waits.set(s.key, []).get(s.key)!).push([s.time, end]);
  let longest = 0;
  for (const [key, intervals] of waits) {
    const held = (byKey.get(key) ?? []).map((h) => [h.granted, h.believedUntil] as [number, number]);
    // Walk time: waiting and not held.
    const points = [
      ...intervals.flatMap(([a, b]) => [
        [a, 1, 0],
        [b, -1, 0],
      ]),
      ...held.flatMap(([a, b]) => [
        [a, 0, 1],
        [b, 0, -1],
      ]),
    ].sort((x, y) => x[0]! - y[0]!);
    let waiting = 0;
    let holding = 0;
    let since: number | undefined;
    for (const [at, w, h] of points as [number, number, number][]) {
      waiting += w;
      holding += h;
      const unavailable = waiting > 0 && holding === 0;
      if (unavailable && since === undefined) since = at;
      if (!unavailable && since !== undefined) {
        longest = Math.max(longest, at - since);
        since = undefined;
      }
    }
  }
  return longest;
}
