// Leader election and once-per-fleet jobs, built on the lock and nothing else of a backend, so
// they work on every store, every variant and through a migration. A term of leadership is the
// lock of the election's name: candidates wait for it in line, its fencing token is the term's,
// and its signal tells the leader of a loss. What a lock cannot carry, the leader's value, is a
// record in the locker's `Fence`, written with the term's token: a leader whose term ended cannot
// overwrite its successor's. A job run once per window is the lock of the job's name while it
// runs, and a second lock, left to expire in the store, for the rest of its window.
import { InvalidArgumentError, LockTimeoutError, NotOwnerError, SelfDeadlockError } from './errors.js';
import type { Fence } from '../kit/fence.js';
import { count, describe, instance, ms, readOptions, signal as signalRule, wait as waitRule, type Rules } from '../kit/options.js';
import { now, after, noop } from '../kit/time.js';
import { sleep } from '../kit/wait.js';
import { LockHandle } from '../lease/lock-handle.js';
import { MAX_KEY_BYTES, validateKey } from './validate.js';
import type { Capabilities } from '../kit/backend.js';
import type {
  ElectOptions,
  Inspection,
  JobContext,
  Leader,
  LeaderChange,
  Leadership,
  Lock,
  LockOptions,
  ObserveOptions,
  RunOnceOptions,
  RunOnceResult,
  TryLockOptions,
} from './types.js';

/** The fence resource an election's value is published under: the name and this. */
export const LEADER_RECORD_SUFFIX = '#deadbolt-leader';
/** The lock that marks a job as run for the rest of its window (`lockAtLeastForMs`): the name and this. */
export const RAN_MARKER_SUFFIX = '#deadbolt-ran';
/** Longest value a leader may publish, in UTF-8 bytes: an id or an address, not a payload. */
export const MAX_LEADER_VALUE_BYTES = 65_536;

const TRY_ELECT_RULES = {
  value: instance((v): v is string => typeof v === 'string', 'a string'),
  ttlMs: count(1),
  signal: signalRule,
} satisfies Rules<Omit<ElectOptions, 'timeoutMs'>>;
const ELECT_RULES = { ...TRY_ELECT_RULES, timeoutMs: waitRule } satisfies Rules<ElectOptions>;
const OBSERVE_RULES = { signal: signalRule, intervalMs: ms(10) } satisfies Rules<ObserveOptions>;
const RUN_ONCE_RULES = { lockAtMostForMs: count(1), lockAtLeastForMs: count(0), signal: signalRule } satisfies Rules<RunOnceOptions>;

/** What elections and jobs need of their locker. */
export interface ElectionHost {
  lock(key: string, options?: LockOptions): Promise<Lock>;
  tryLock(key: string, options?: TryLockOptions): Promise<Lock | null>;
  inspect(key: string): Promise<Inspection>;
  readonly fence: Fence | undefined;
  readonly capabilities: Required<Capabilities>;
  readonly timeoutMs: number;
  readonly operationTimeoutMs: number;
  /** This locker's campaigns and terms by name: whether each still counts (a lost or resigned term does not). */
  readonly campaigns: Map<string, () => boolean>;
}

/** The leader's record in the fence. */
interface LeaderRecord {
  readonly value: string;
  readonly term: number;
  /** The term's lock owner: which holder the record is (a migration's dual phase shows no holder's token). */
  readonly owner: string;
  /** The leader's wall clock at its election (ms since the epoch): `Leader.sinceMs` only. */
  readonly at: number;
}

/** @throws InvalidArgumentError unless `name` is a key that leaves room for `suffix`. */
function validateName(name: unknown, suffix: string): asserts name is string {
  validateKey(name, 'name');
  const bytes = Buffer.byteLength(name, 'utf8') + suffix.length;
  if (bytes > MAX_KEY_BYTES)
    throw new InvalidArgumentError(`name must be at most ${MAX_KEY_BYTES - suffix.length} UTF-8 bytes (its keys add ${suffix.length})`);
}

function validateValue(value: unknown): asserts value is string {
  if (typeof value !== 'string') throw new InvalidArgumentError(`value must be a string, got ${describe(value)}`);
  if (Buffer.byteLength(value, 'utf8') > MAX_LEADER_VALUE_BYTES)
    throw new InvalidArgumentError(`value must be at most ${MAX_LEADER_VALUE_BYTES} UTF-8 bytes`);
}

function fenceOf(host: ElectionHost, where: string): Fence {
  if (!host.fence)
    throw new InvalidArgumentError(
      `${where} needs the locker's fence option (where the leader's value is published): createLocker(backend, { fence })`,
    );
  return host.fence;
}

/** The record under `name`, or null when none was written (or it is not one of ours). */
async function readRecord(fence: Fence, name: string): Promise<(LeaderRecord & { token: bigint }) | null> {
  const stored = await fence.read(name + LEADER_RECORD_SUFFIX);
  if (!stored) return null;
  try {
    const record = JSON.parse(stored.value) as LeaderRecord;
    if (
      typeof record.value !== 'string' ||
      typeof record.owner !== 'string' ||
      !Number.isSafeInteger(record.term) ||
      typeof record.at !== 'number'
    )
      return null;
    return { ...record, token: stored.token };
  } catch {
    return null;
  }
}

/** `elect` (`once`: `tryElect`). */
export async function elect(host: ElectionHost, name: string, raw: ElectOptions, once: boolean): Promise<Leadership | null> {
  validateName(name, LEADER_RECORD_SUFFIX);
  const where = once ? 'tryElect' : 'elect';
  const options: Partial<ElectOptions> = readOptions(raw, once ? TRY_ELECT_RULES : ELECT_RULES, where);
  validateValue(options.value);
  const fence = fenceOf(host, where);
  if (host.campaigns.get(name)?.()) throw new SelfDeadlockError(name);
  const started = now();
  // Counts from here: a second campaign in this locker is refused, not queued behind this one.
  host.campaigns.set(name, () => true);
  let lock: Lock | null;
  try {
    // Never reentrant: a term is one hold, not a share of another.
    const call = { ttlMs: options.ttlMs, signal: options.signal, reentrant: false };
    lock = once ? await host.tryLock(name, call) : await host.lock(name, { ...call, timeoutMs: options.timeoutMs });
  } catch (error) {
    host.campaigns.delete(name);
    throw error;
  }
  if (!lock) {
    host.campaigns.delete(name);
    return null;
  }
  try {
    const previous = await readRecord(fence, name);
    const record: LeaderRecord = { value: options.value!, term: (previous?.term ?? 0) + 1, owner: lock.owner, at: Date.now() };
    // The caller's deadline bounds the publication too (a store call's own bound otherwise).
    // A single attempt (`tryElect`, a timeout of 0) has a store call's bound for it.
    const timeoutMs = once ? 0 : (options.timeoutMs ?? host.timeoutMs);
    const leftMs = timeoutMs === 0 ? host.operationTimeoutMs : Math.min(host.operationTimeoutMs, timeoutMs - (now() - started));
    if (leftMs <= 0) throw new LockTimeoutError(name, timeoutMs);
    await fence.write(name + LEADER_RECORD_SUFFIX, lock.token, JSON.stringify(record), { signal: lock.signal, timeoutMs: leftMs });
    const term = new Term(host, fence, name, lock, record);
    host.campaigns.set(name, () => term.held);
    return term;
  } catch (error) {
    host.campaigns.delete(name);
    await lock.release().catch(noop);
    throw error;
  }
}

class Term implements Leadership {
  readonly name: string;
  readonly token: bigint;
  readonly term: number;
  readonly #host: ElectionHost;
  readonly #fence: Fence;
  readonly #lock: Lock;
  #record: LeaderRecord;
  #resigned: Promise<void> | undefined;
  /** The last publication: each waits for the one before, so the last `proclaim` called is the one that stands. */
  #writing: Promise<unknown> = Promise.resolve();

  constructor(host: ElectionHost, fence: Fence, name: string, lock: Lock, record: LeaderRecord) {
    this.#host = host;
    this.#fence = fence;
    this.name = name;
    this.#lock = lock;
    this.token = lock.token;
    this.term = record.term;
    this.#record = record;
  }

  get value(): string {
    return this.#record.value;
  }

  get signal(): AbortSignal {
    return this.#lock.signal;
  }

  get held(): boolean {
    return !this.#resigned && this.#lock.held;
  }

  async proclaim(value: string): Promise<void> {
    validateValue(value);
    const record = { ...this.#record, value };
    const write = this.#writing.then(() => {
      if (this.#resigned) throw new NotOwnerError(`the term of election ${JSON.stringify(this.name)} was resigned`);
      this.#lock.signal.throwIfAborted();
      return this.#fence.write(this.name + LEADER_RECORD_SUFFIX, this.token, JSON.stringify(record), {
        signal: this.#lock.signal,
        timeoutMs: this.#host.operationTimeoutMs,
      });
    });
    this.#writing = write.catch(noop);
    await write;
    this.#record = record;
  }

  resign(): Promise<void> {
    this.#resigned ??= this.#lock.release();
    return this.#resigned;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.resign();
  }
}

/** `leader`: the lock's holder, and its record when the record is that holder's. */
export async function leader(host: ElectionHost, name: string): Promise<Leader | null> {
  validateName(name, LEADER_RECORD_SUFFIX);
  return (await readLeader(host, name)).leader;
}

/**
 * The leader now, and the last term that published (0: none). The record is read first, then the
 * holder: a holder that is not the record's owner came after it, so the record's term is over.
 */
async function readLeader(host: ElectionHost, name: string): Promise<{ leader: Leader | null; published: number }> {
  const record = await readRecord(fenceOf(host, 'leader'), name);
  const holder = (await host.inspect(name)).holders[0];
  const published = record?.term ?? 0;
  if (!holder) return { leader: null, published };
  // A migration's dual phase shows no holder's token, but its owner.
  const mine = record && (holder.owner !== null ? record.owner === holder.owner : record.token === holder.token);
  // Until a new leader publishes, its value is unknown.
  if (!mine) return { leader: { value: null, token: holder.token, term: null, sinceMs: null }, published };
  return {
    leader: { value: record.value, token: record.token, term: record.term, sinceMs: Math.max(0, Date.now() - record.at) },
    published,
  };
}

/** `observe`: its input checked at the call, then the leader read every `intervalMs`, each change yielded. */
export function observe(host: ElectionHost, name: string, raw: ObserveOptions | undefined): AsyncGenerator<LeaderChange> {
  validateName(name, LEADER_RECORD_SUFFIX);
  const { signal, intervalMs = 1000 } = readOptions(raw, OBSERVE_RULES, 'observe');
  fenceOf(host, 'observe');
  return changes(host, name, intervalMs, signal);
}

/**
 * A term is seen when a read finds its leader with its record; every published term before the
 * one seen now (or before and at the last published, when none is seen) is over, so those not
 * seen since the last change are counted as missed. Terms before the first read are history, not
 * missed.
 */
async function* changes(
  host: ElectionHost,
  name: string,
  intervalMs: number,
  signal: AbortSignal | undefined,
): AsyncGenerator<LeaderChange> {
  let last: Leader | null | undefined;
  let accounted = 0;
  while (!signal?.aborted) {
    const { leader: current, published } = await readLeader(host, name);
    const over = current?.term != null ? current.term - 1 : published;
    const missedTerms = last === undefined ? 0 : Math.max(0, over - accounted);
    const changed =
      last === undefined || (current === null) !== (last === null) || current?.token !== last?.token || current?.value !== last?.value;
    accounted = Math.max(accounted, published);
    if (changed || missedTerms > 0) {
      last = current;
      yield { leader: current, missedTerms };
    }
    await sleep(intervalMs, signal).catch(noop);
  }
}

/** `runOnce`. */
export async function runOnce<T>(
  host: ElectionHost,
  name: string,
  job: (context: JobContext) => Promise<T> | T,
  raw: RunOnceOptions,
): Promise<RunOnceResult<T>> {
  validateName(name, RAN_MARKER_SUFFIX);
  if (typeof job !== 'function') throw new InvalidArgumentError(`job must be a function, got ${describe(job)}`);
  const options = readOptions(raw, RUN_ONCE_RULES, 'runOnce');
  const { lockAtMostForMs: atMostMs, lockAtLeastForMs: atLeastMs = 0, signal } = options;
  if (atMostMs === undefined) throw new InvalidArgumentError('runOnce needs lockAtMostForMs');
  if (atLeastMs > atMostMs) throw new InvalidArgumentError(`lockAtLeastForMs (${atLeastMs}) must be at most lockAtMostForMs (${atMostMs})`);
  const marker = name + RAN_MARKER_SUFFIX;
  const ranRecently = async () => (await host.inspect(marker)).holders.length > 0;
  const claim = await claimJob(host, name, atMostMs, signal);
  if (!claim) return { ran: false, reason: (await ranRecently()) ? 'ran-recently' : 'busy' };
  let keep = false;
  try {
    if (await ranRecently()) return { ran: false, reason: 'ran-recently' };
    const started = now();
    let outcome: { ok: true; result: T } | { ok: false; error: unknown };
    try {
      outcome = { ok: true, result: await job({ token: claim.token, signal: claim.signal }) };
    } catch (error) {
      outcome = { ok: false, error };
    }
    keep = !(await markRan(host, marker, atLeastMs - (now() - started), claim));
    if (!outcome.ok) throw outcome.error;
    // Work finished after the claim was lost was done without it: never report it as done.
    if (claim.signal.aborted) throw claim.signal.reason;
    return { ran: true, result: outcome.result, token: claim.token };
  } finally {
    if (!keep) await claim.release().catch(noop);
  }
}

/**
 * The job's claim, or null when someone holds it. On a store whose one-shot attempts can all lose
 * to each other (its waiters do not queue: two attempts at once may each see the other and back
 * off), a fleet firing together could skip a window that nobody ran: while the claim shows no
 * holder, the attempt is made again after a short random pause, for up to the operation timeout.
 */
async function claimJob(host: ElectionHost, name: string, ttlMs: number, signal: AbortSignal | undefined): Promise<Lock | null> {
  const until = now() + host.operationTimeoutMs;
  for (;;) {
    const claim = await host.tryLock(name, { ttlMs, signal, reentrant: false });
    if (claim || host.capabilities.fairness === 'fifo') return claim;
    if ((await host.inspect(name)).holders.length > 0 || now() >= until) return null;
    await sleep(10 + Math.random() * 40, signal);
  }
}

/**
 * Marks the job as run for `leftMs` more: the marker lock, left to the store to expire (a session
 * store's lease ends with its session, so this process gives it back when the time is up). If the
 * marker cannot be taken, the claim itself stands in for it (a later call then says `busy`, not
 * `ran-recently`, but never runs the job again inside the window). Resolves whether the claim may
 * be released now.
 */
async function markRan(host: ElectionHost, marker: string, leftMs: number, claim: Lock): Promise<boolean> {
  if (leftMs <= 0) return true;
  const { ttlGranularityMs: step, minTtlMs } = host.capabilities;
  const ttlMs = Math.max(minTtlMs, Math.ceil(leftMs / step) * step);
  const taken = await host.tryLock(marker, { ttlMs, reentrant: false }).catch(() => null);
  leaveFor(host, taken ?? claim, leftMs);
  return taken !== null;
}

/** Leaves `lock` held in the store for `leftMs`, untended: a ttl store expires it; otherwise a timer here gives it back. */
function leaveFor(host: ElectionHost, lock: Lock, leftMs: number): void {
  if (host.capabilities.lease === 'ttl' && lock instanceof LockHandle) lock.abandon();
  else after(leftMs, () => void lock.release().catch(noop), true);
}
