/**
 * Generated operation histories, checked against a model of the contract. A program is a list of
 * steps by a few clients (each a process of its own: a locker with its own connections) on one or
 * two keys: takes, waits, releases, a claim freed behind its holder, extends, fenced writes (two at
 * once, too) and reads, semaphore permits, and, on a migration, clients moving between phases.
 * `runProgram` runs one on a real store and checks every step as it goes against what the
 * contract allows: no two holders that were not told of a loss, tokens strictly rising per key
 * (across phases too), a fence that takes a write iff its token is at least the highest it took
 * and reads back exactly what it took, no more permits than the limit, waiters served in arrival
 * order where the store promises it, and every call settled within its deadline. A violation
 * throws `ModelViolation` naming the step. fast-check (model.test.ts) generates the programs and
 * shrinks a failing one to a minimal program, printed as a regression test to paste into
 * model-regressions.test.ts.
 */
import fc from 'fast-check';
import type { Fence, Lock, Locker, MigrationPhase } from '@deadbolt/core';

/** One step of a program. Client and key numbers are taken modulo the program's counts. */
export type Step =
  /** `tryLock`. */
  | { op: 'try'; c: number; k: number }
  /** `lock()`: granted at once when the key is free, else a wait left running in the background. */
  | { op: 'wait'; c: number; k: number }
  | { op: 'release'; c: number; k: number }
  /** An operator frees the client's claim behind its back (`forceRelease`): a lost lease it is not told of. */
  | { op: 'lose'; c: number; k: number }
  | { op: 'extend'; c: number; k: number }
  /**
   * A fenced write to the key's resource `r` (one of three, so that some are new) with the client's latest
   * token for the key (stale or not); `race`: another client's write at the same moment.
   */
  | { op: 'write'; c: number; k: number; r: number; v: string; race?: number }
  | { op: 'read'; k: number; r: number }
  /** A permit of the key's semaphore (limit 2), one-shot; and giving the client's oldest back. */
  | { op: 'permit'; c: number; k: number }
  | { op: 'unpermit'; c: number; k: number }
  /** A migration: the client becomes a new process one phase on (+1) or back (-1), if the rollout allows it. */
  | { op: 'phase'; c: number; dir: 1 | -1 };

export interface Program {
  readonly clients: number;
  readonly keys: number;
  readonly steps: readonly Step[];
}

/** What a program runs on: one store (or a migration between two), as new processes of it. */
export interface Target {
  readonly name: string;
  /** Waiters are granted in arrival order. */
  readonly fifo: boolean;
  readonly ttlMs: number;
  /** A migration: `newLocker` takes the phase the new process runs in. */
  readonly migration: boolean;
  /** A new process: a locker over new backends (in `phase`, for a migration). */
  newLocker(phase: MigrationPhase): Promise<Locker>;
  /** The store's fence; one for the whole run. */
  fence(): Fence;
  /**
   * Optional (a single store: its processes never change phase): the processes and fence every
   * program of a property runs on, made once. Programs use keys and resources of their own and give
   * back all they hold, so one cannot meet another, and a program does not pay for connecting.
   */
  shared?(): Promise<{ readonly operator: Locker; readonly clients: readonly Locker[]; readonly fence: Fence }>;
}

/** A step that broke the contract: the program, the step and what went wrong. */
export class ModelViolation extends Error {
  constructor(
    readonly step: number,
    what: string,
  ) {
    super(`step ${step}: ${what}`);
  }
}

const PHASES: readonly MigrationPhase[] = ['from', 'dual', 'to'];
const SEMAPHORE_LIMIT = 2;
/** How long any one call may take before it counts as one that never settles. */
const DEADLINE_MS = 15_000;

/** A value a fence may be handed: mostly plain, sometimes what stores mangle (U+0000, a lone surrogate). */
const valueArb = fc.string({
  unit: fc.oneof(
    { weight: 6, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 1 }) },
    { weight: 1, arbitrary: fc.constantFrom('\u0000', '\uD800', '\uDFFF', "'", '\\', '🦀') },
  ),
  maxLength: 6,
});

/**
 * The mix of steps a program draws from, by weight. A program follows one mix, so that each part of
 * the contract gets programs dense in it: `all`, `fence` (takes and writes, often two at once, on
 * resources often new), `queue` (takes, waits, releases, losses, extends) and, on a migration,
 * `rollout` (takes and waits while clients move between phases).
 */
const MIXES: Record<'all' | 'fence' | 'queue' | 'rollout', Partial<Record<Step['op'], number>>> = {
  all: { try: 5, wait: 2, release: 4, lose: 1, extend: 1, write: 4, read: 2, permit: 1, unpermit: 1, phase: 4 },
  fence: { try: 4, release: 3, lose: 1, write: 8, read: 2 },
  queue: { try: 4, wait: 4, release: 4, lose: 2, extend: 2 },
  rollout: { try: 4, wait: 2, release: 4, write: 2, phase: 6 },
};

/** Programs of `maxSteps` steps at most; phase steps only for a migration. */
export function programArb(migration: boolean, maxSteps = 24): fc.Arbitrary<Program> {
  const c = fc.nat({ max: 2 });
  const k = fc.nat({ max: 1 });
  const r = fc.nat({ max: 2 });
  const arbs: { [O in Step['op']]: fc.Arbitrary<Step> } = {
    try: fc.record({ op: fc.constant('try' as const), c, k }),
    wait: fc.record({ op: fc.constant('wait' as const), c, k }),
    release: fc.record({ op: fc.constant('release' as const), c, k }),
    lose: fc.record({ op: fc.constant('lose' as const), c, k }),
    extend: fc.record({ op: fc.constant('extend' as const), c, k }),
    write: fc.record(
      { op: fc.constant('write' as const), c, k, r, v: valueArb, race: fc.option(c, { nil: undefined, freq: 2 }) },
      { requiredKeys: ['op', 'c', 'k', 'r', 'v'] },
    ),
    read: fc.record({ op: fc.constant('read' as const), k, r }),
    permit: fc.record({ op: fc.constant('permit' as const), c, k }),
    unpermit: fc.record({ op: fc.constant('unpermit' as const), c, k }),
    phase: fc.record({ op: fc.constant('phase' as const), c, dir: fc.constantFrom(1 as const, -1 as const) }),
  };
  const mixOf = (weights: Partial<Record<Step['op'], number>>) =>
    fc.oneof(
      ...Object.entries(weights)
        .filter(([op]) => migration || op !== 'phase')
        .map(([op, weight]) => ({ weight, arbitrary: arbs[op as Step['op']] })),
    );
  const mixes = [MIXES.all, MIXES.fence, MIXES.queue, ...(migration ? [MIXES.rollout] : [])];
  // Mostly two clients on one key: conflicts are what the contract is about.
  const few = (most: number) => fc.oneof({ weight: 3, arbitrary: fc.constant(most) }, { weight: 1, arbitrary: fc.constant(most + 1) });
  return fc.record({
    clients: few(2),
    keys: few(1),
    steps: fc.oneof(...mixes.map((mix) => fc.array(mixOf(mix), { minLength: 1, maxLength: maxSteps, size: 'max' }))),
  });
}

/** The program as the line of a regression test (model-regressions.test.ts). */
export function asRegression(target: string, program: Program, note: string): string {
  const field = ([name, value]: [string, unknown]) => `${name}: ${typeof value === 'string' ? JSON.stringify(value) : String(value)}`;
  const steps = program.steps
    .map(
      (s) =>
        `    { ${Object.entries(s)
          .filter(([, v]) => v !== undefined)
          .map(field)
          .join(', ')} },`,
    )
    .join('\n');
  return `it(${JSON.stringify(`regression: ${note}`)}, () =>\n  replay(${JSON.stringify(target)}, { clients: ${program.clients}, keys: ${program.keys}, steps: [\n${steps}\n  ] }));`;
}

/** Whether every store can keep `value` (see `checkFencedWrite`): well-formed, no U+0000. */
const keepable = (value: string) => value.isWellFormed() && !value.includes('\u0000');

interface Client {
  locker: Locker;
  phase: MigrationPhase;
  /** The latest handle on each key (released, lost or held). */
  readonly handles: Map<string, Lock>;
  readonly permits: Map<string, Lock[]>;
  /** A wait under way: its key, and its outcome once settled. */
  pending?: { key: string; promise: Promise<Lock>; settled?: Lock | Error; abort: AbortController };
}

/** A fenced resource as the model has it: the last write it took. */
interface Resource {
  fence?: { token: bigint; value: string };
}

interface KeyModel {
  /** Who holds it in the store, and whether the store has let them go behind their back. */
  holder?: { client: number; lock: Lock };
  /** Waiters in arrival order. */
  readonly queue: number[];
  lastToken: bigint;
  lastSharedToken: bigint;
  /** Live permits: client and lock. */
  readonly permits: { client: number; lock: Lock }[];
}

/** `promise`, or a violation when it does not settle within the deadline. */
async function within<T>(step: number, what: string, promise: Promise<T>, ms = DEADLINE_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new ModelViolation(step, `${what} did not settle within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

const codeOf = (error: unknown) => (error as { code?: string } | undefined)?.code;

/**
 * Runs `program` on `target` and checks each step (see the file's comment); the keys and fenced
 * resources start with `prefix`, new for each run. @throws ModelViolation.
 */
export async function runProgram(target: Target, program: Program, prefix: string): Promise<void> {
  const shared = target.shared && !target.migration ? await target.shared() : undefined;
  const fence = shared?.fence ?? target.fence();
  const clients: Client[] = [];
  const operator = shared?.operator ?? (await target.newLocker('dual'));
  /** The lockers this program made, closed at its end. */
  const lockers = shared ? [] : [operator];
  for (let i = 0; i < program.clients; i++) {
    const locker = shared?.clients[i] ?? (await target.newLocker('from'));
    if (!shared) lockers.push(locker);
    clients.push({ locker, phase: 'from', handles: new Map(), permits: new Map() });
  }
  // Keys are new for each run; messages name them k0, k1.
  const keys = Array.from({ length: program.keys }, (_, i) => `${prefix}/k${i}`);
  const shown = (key: string) => key.slice(prefix.length + 1);
  const models = new Map<string, KeyModel>(keys.map((key) => [key, { queue: [], lastToken: -1n, lastSharedToken: -1n, permits: [] }]));
  let n = -1;
  const fail = (what: string): never => {
    throw new ModelViolation(n, what);
  };

  /** A grant to `c` of `key`: above every earlier token, and never beside a holder the store still has. */
  const granted = (c: number, key: string, lock: Lock) => {
    const m = models.get(key)!;
    if (m.holder && m.holder.client !== c) fail(`client ${c} was granted ${shown(key)} while client ${m.holder.client} held it`);
    if (m.holder && m.holder.client === c) fail(`client ${c} was granted ${shown(key)} a second time while it held it`);
    if (lock.token <= m.lastToken) fail(`client ${c} got token ${lock.token} for ${shown(key)}, not above the last, ${m.lastToken}`);
    m.lastToken = lock.token;
    m.holder = { client: c, lock };
    clients[c]!.handles.set(key, lock);
  };

  /** The key is free in the store: the next waiter (the first, where the store promises order) is granted. */
  const serve = async (key: string) => {
    const m = models.get(key)!;
    if (m.queue.length === 0) return;
    // Only the grants awaited here are made: one left unawaited would reject unhandled when its
    // wait is aborted at the program's end.
    const grantOf = (c: number) => clients[c]!.pending!.promise.then(() => c);
    const c = target.fifo
      ? await within(n, `the first waiter's grant of ${shown(key)}`, grantOf(m.queue[0]!))
      : await within(n, `a waiter's grant of ${shown(key)}`, Promise.race(m.queue.map(grantOf)));
    const lock = clients[c]!.pending!.settled;
    if (!(lock && !(lock instanceof Error))) fail(`client ${c}'s wait for ${shown(key)} failed: ${String(lock)}`);
    m.queue.splice(m.queue.indexOf(c), 1);
    clients[c]!.pending = undefined;
    // A FIFO store grants the others nothing now.
    await new Promise((resolve) => setImmediate(resolve));
    for (const other of m.queue) if (clients[other]!.pending?.settled) fail(`client ${other} was granted ${shown(key)} beside client ${c}`);
    granted(c, key, lock as Lock);
  };

  /** Ends the hold of `c` on `key` in the model (a release or a loss). */
  const vacate = async (key: string) => {
    models.get(key)!.holder = undefined;
    await serve(key);
  };

  /** What each fenced resource took last, as the model has it. */
  const resources = new Map<string, Resource>();
  const resourceOf = (key: string, r: number) => {
    const name = `${key}/r${r % 3}`;
    if (!resources.has(name)) resources.set(name, {});
    return { name, model: resources.get(name)! };
  };
  const writeOutcome = (m: Resource, token: bigint, value: string): 'ok' | 'STALE_TOKEN' | 'INVALID_ARGUMENT' => {
    if (!keepable(value)) return 'INVALID_ARGUMENT';
    if (m.fence && token < m.fence.token) return 'STALE_TOKEN';
    m.fence = { token, value };
    return 'ok';
  };
  const attempt = (p: Promise<void>) =>
    p.then(
      () => 'ok' as const,
      (error: unknown) =>
        codeOf(error) === 'STALE_TOKEN' || codeOf(error) === 'INVALID_ARGUMENT' ? codeOf(error)! : `failed: ${String(error)}`,
    );

  try {
    for (const step of program.steps) {
      n++;
      const c = 'c' in step ? step.c % program.clients : 0;
      const client = clients[c]!;
      const key = 'k' in step ? keys[step.k % program.keys]! : '';
      const m = models.get(key);
      switch (step.op) {
        case 'try': {
          if (client.pending) break;
          const lock = await within(n, `tryLock(${shown(key)})`, client.locker.tryLock(key)).catch((e: unknown) =>
            fail(`tryLock(${shown(key)}) failed: ${String(e)}`),
          );
          if (lock) granted(c, key, lock);
          else if (!m!.holder) fail(`tryLock(${shown(key)}) by client ${c} found it busy, but nobody held it`);
          break;
        }
        case 'wait': {
          if (client.pending || m!.holder?.client === c) break;
          const abort = new AbortController();
          const promise = client.locker.lock(key, { signal: abort.signal });
          const pending: NonNullable<Client['pending']> = { key, promise, abort };
          promise.then(
            (lock) => (pending.settled = lock),
            (error: unknown) => (pending.settled = error as Error),
          );
          client.pending = pending;
          if (!m!.holder) {
            const lock = await within(n, `lock(${shown(key)}) of a free key`, promise).catch((e: unknown) =>
              fail(`lock(${shown(key)}) failed: ${String(e)}`),
            );
            client.pending = undefined;
            granted(c, key, lock);
            break;
          }
          m!.queue.push(c);
          // In line before the next step, where the store shows its line (else a moment).
          const until = performance.now() + 5000;
          for (;;) {
            const seen = await within(n, `inspect(${shown(key)})`, operator.inspect(key));
            if (seen.waiters === null) {
              await new Promise((resolve) => setTimeout(resolve, 50));
              break;
            }
            if (seen.waiters.length >= m!.queue.length || performance.now() > until) break;
            await new Promise((resolve) => setTimeout(resolve, 10));
          }
          if (pending.settled)
            fail(`lock(${shown(key)}) by client ${c} settled while client ${m!.holder.client} held it: ${String(pending.settled)}`);
          break;
        }
        case 'release': {
          const lock = client.handles.get(key);
          if (!lock) break;
          await within(n, `release(${shown(key)})`, lock.release()).catch((e: unknown) =>
            fail(`release(${shown(key)}) failed: ${String(e)}`),
          );
          if (m!.holder?.lock === lock) await vacate(key);
          break;
        }
        case 'lose': {
          if (m!.holder?.client !== c) break;
          const freed = await within(n, `forceRelease(${shown(key)})`, operator.forceRelease(key, m!.holder.lock.owner)).catch(
            (e: unknown) => fail(`forceRelease(${shown(key)}) failed: ${String(e)}`),
          );
          if (!freed) fail(`forceRelease(${shown(key)}) of its holder freed nothing`);
          await vacate(key);
          break;
        }
        case 'extend': {
          const lock = client.handles.get(key);
          if (!lock) break;
          const current = m!.holder?.lock === lock;
          const outcome = await within(
            n,
            `extend(${shown(key)})`,
            lock.extend().then(
              () => 'ok',
              (e: unknown) => codeOf(e) ?? String(e),
            ),
          );
          if (current && outcome !== 'ok') fail(`extend(${shown(key)}) by its holder, client ${c}: ${outcome}`);
          if (!current && outcome === 'ok') fail(`extend(${shown(key)}) by client ${c}, which no longer held it, succeeded`);
          if (current) break;
          if (!/^[A-Z_]+$/.test(outcome)) fail(`extend(${shown(key)}) of a lease no longer held failed untyped: ${outcome}`);
          break;
        }
        case 'write': {
          const lock = client.handles.get(key);
          if (!lock) break;
          const { name: res, model: f } = resourceOf(key, step.r);
          const at = shown(res);
          const other = step.race === undefined ? undefined : clients[step.race % program.clients]!.handles.get(key);
          if (!other || other === lock) {
            const expected = writeOutcome(f, lock.token, step.v);
            const got = await within(n, `write(${at})`, attempt(fence.write(res, lock.token, step.v)));
            if (got !== expected) fail(`write(${at}, ${lock.token}, ${JSON.stringify(step.v)}): ${got}, the model says ${expected}`);
            break;
          }
          // Two writes at once: their outcomes must be those of one order or the other.
          const [a, b] = [
            { token: lock.token, value: step.v },
            { token: other.token, value: `${step.v}#2` },
          ];
          const got = await within(
            n,
            `two writes of ${at}`,
            Promise.all([attempt(fence.write(res, a.token, a.value)), attempt(fence.write(res, b.token, b.value))]),
          );
          const orders = [
            [a, b],
            [b, a],
          ].map((order) => {
            const copy: Resource = { ...(f.fence ? { fence: { ...f.fence } } : {}) };
            const outcomes = order.map((w) => writeOutcome(copy, w.token, w.value));
            return { outcomes: order[0] === a ? outcomes : [outcomes[1], outcomes[0]], fence: copy.fence };
          });
          const read = await within(n, `read(${at})`, fence.read(res));
          const match = orders.find(
            (o) => o.outcomes[0] === got[0] && o.outcomes[1] === got[1] && o.fence?.token === read?.token && o.fence?.value === read?.value,
          );
          if (!match)
            fail(
              `two writes of ${at} at once (tokens ${a.token}, ${b.token}): ${got.join(', ')}, then it read ${read ? `${read.token} ${JSON.stringify(read.value)}` : 'nothing'}: no order of the two gives that`,
            );
          f.fence = match!.fence;
          break;
        }
        case 'read': {
          const { name: res, model: f } = resourceOf(key, step.r);
          const read = await within(n, `read(${shown(res)})`, fence.read(res)).catch((e: unknown) =>
            fail(`read(${shown(res)}) failed: ${String(e)}`),
          );
          const want = f.fence;
          if ((read === null) !== (want === undefined) || (read && (read.token !== want!.token || read.value !== want!.value)))
            fail(
              `read(${shown(res)}): ${read ? `${read.token} ${JSON.stringify(read.value)}` : 'nothing'}, the model says ${want ? `${want.token} ${JSON.stringify(want.value)}` : 'nothing'}`,
            );
          break;
        }
        case 'permit': {
          const permit = await within(
            n,
            `tryAcquire(${shown(key)})`,
            client.locker.semaphore(key, { limit: SEMAPHORE_LIMIT }).tryAcquire(),
          ).catch((e: unknown) => fail(`tryAcquire(${shown(key)}) failed: ${String(e)}`));
          if (!permit) {
            if (m!.permits.length < SEMAPHORE_LIMIT)
              fail(`tryAcquire(${shown(key)}) refused with ${m!.permits.length} of ${SEMAPHORE_LIMIT} permits out`);
            break;
          }
          if (m!.permits.length >= SEMAPHORE_LIMIT)
            fail(`tryAcquire(${shown(key)}) granted a permit beyond the limit of ${SEMAPHORE_LIMIT}`);
          if (permit.token <= m!.lastSharedToken)
            fail(`a permit of ${shown(key)} got token ${permit.token}, not above the last, ${m!.lastSharedToken}`);
          m!.lastSharedToken = permit.token;
          m!.permits.push({ client: c, lock: permit });
          break;
        }
        case 'unpermit': {
          const i = m!.permits.findIndex((p) => p.client === c);
          if (i < 0) break;
          const [{ lock }] = m!.permits.splice(i, 1) as [{ client: number; lock: Lock }];
          await within(n, `release of a permit of ${shown(key)}`, lock.release()).catch((e: unknown) =>
            fail(`release of a permit failed: ${String(e)}`),
          );
          break;
        }
        case 'phase': {
          if (!target.migration) break;
          const next = PHASES[PHASES.indexOf(client.phase) + step.dir];
          if (!next || client.pending) break;
          // A rollout runs two adjacent phases at most: never from and to at once.
          const phases = new Set(clients.map((x, i) => (i === c ? next : x.phase)));
          if (phases.has('from') && phases.has('to')) break;
          // The process ends (what it holds is released with it) and a new one starts in the next phase.
          for (const [k2, model] of models) {
            if (model.holder?.client === c) {
              await within(n, `release(${shown(k2)})`, model.holder.lock.release()).catch((e: unknown) =>
                fail(`release(${shown(k2)}) failed: ${String(e)}`),
              );
              await vacate(k2);
            }
            for (let i = model.permits.length - 1; i >= 0; i--) {
              if (model.permits[i]!.client !== c) continue;
              await model.permits[i]!.lock.release();
              model.permits.splice(i, 1);
            }
          }
          await within(n, 'close()', client.locker.close());
          client.locker = await target.newLocker(next);
          lockers.push(client.locker);
          client.phase = next;
          client.handles.clear();
          break;
        }
      }
    }
  } finally {
    for (const client of clients) client.pending?.abort.abort(new Error('the program ended'));
    if (shared) {
      // The processes live on: give back what the program holds, and let aborted waits end.
      await Promise.allSettled(
        clients.flatMap((client) => (client.pending ? [client.pending.promise.then((lock) => lock.release())] : [])),
      );
      const held = [...models.values()].flatMap((m) => [...(m.holder ? [m.holder.lock] : []), ...m.permits.map((p) => p.lock)]);
      await Promise.allSettled(
        [...held, ...clients.flatMap((client) => [...client.handles.values()])].map((lock) => within(n, 'release()', lock.release())),
      );
    } else {
      await Promise.allSettled(lockers.map((l) => within(n, 'close()', l.close())));
      await fence.close();
    }
  }
}
