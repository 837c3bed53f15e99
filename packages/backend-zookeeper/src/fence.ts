// Fenced writes in ZooKeeper: each resource is one persistent node holding `<token> <value>`. A
// write reads the node, refuses a lower token, and sets the data only at the version it read
// (a conditional setData in a multi-op, the version exact even at the node's first, 0): a write
// that slipped in between changes the version, so the set fails and the write looks again, after a
// short random pause that spreads writers out, until the write's deadline. A first write creates
// the node; a lost race to create it looks again too.
import { StaleTokenError, type FencedValue } from '@deadbolt/core';
import { readOptions, rules, sleep, StoreFence, type Rules } from '@deadbolt/core/backend';
import { call, ensurePath } from './nodes.js';
import type { Session, ZooKeeperSessions } from './sessions.js';
import { Code, CreateMode, type Stat } from './zookeeper-client.js';
import { ensembleRules, openSessions } from './zookeeper-backend.js';

/** Options of `zookeeperFence`: where the fenced resources are kept. Unknown names and bad values are `InvalidArgumentError` before any connection. */
export interface ZooKeeperFenceOptions {
  /** `zookeeper://[user:password@]host:port[,host:port...][/chroot]`. The fence opens and closes its own session. */
  url: string;
  /** What keeps these fences apart from others on the same ensemble: the parent of their nodes (`<namespace>/#fence/<base64url resource>`). Default `/deadbolt`. */
  namespace?: string;
  /** Another name for `namespace` (ZooKeeper's word for it); give one of the two. */
  root?: string;
  /** How long to wait for the session to connect. Default 3000 ms. */
  connectTimeoutMs?: number;
  /** The fence's session timeout, within the server's bounds (4 to 40 s by default). Default 4000 ms. */
  sessionTimeoutMs?: number;
}

/** How each option of `zookeeperFence` is checked. */
export const zookeeperFenceOptionRules = {
  ...ensembleRules,
  sessionTimeoutMs: rules.wholeMs(1000),
} satisfies Rules<ZooKeeperFenceOptions>;

/** Values in ZooKeeper guarded by fencing tokens (see core's `Fence`). */
export class ZooKeeperFence extends StoreFence {
  readonly #sessions: ZooKeeperSessions;
  readonly #root: string;
  readonly #sessionTimeoutMs: number;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: ZooKeeperFenceOptions) {
    super('zookeeper');
    const options = readOptions(raw, zookeeperFenceOptionRules, 'zookeeperFence');
    this.#sessions = openSessions(options.url, options.connectTimeoutMs ?? 3000);
    this.closes(() => this.#sessions.close());
    this.#root = `${options.namespace ?? '/deadbolt'}/#fence`;
    this.#sessionTimeoutMs = options.sessionTimeoutMs ?? 4000;
  }

  protected async writeValue(resource: string, token: bigint, value: string, deadline: AbortSignal): Promise<void> {
    const path = this.#pathFor(resource);
    const data = Buffer.from(`${token} ${value}`, 'utf8');
    await this.#on(async (session) => {
      for (let conflicts = 0; ; conflicts++) {
        // A lost race: the writer that won is on its way; wait up to a few ms (more after each
        // loss), so that a crowd of writers does not look again in step and lose again together.
        if (conflicts > 0) await sleep(Math.random() * Math.min(2 ** conflicts, 50), deadline);
        deadline.throwIfAborted();
        const held = await this.#get(session, path, 'fenced write');
        if (!held) {
          await ensurePath(session, this.#root);
          const made = await call(session, 'fenced write', (cb) => session.client.create(path, data, CreateMode.PERSISTENT, cb), [
            Code.NODE_EXISTS,
          ]);
          if (made) return;
          continue;
        }
        if (held.token > token) throw new StaleTokenError(resource, token, held.token);
        const multi = session.client.transaction().setData(path, data, held.stat.version);
        const set = await call(session, 'fenced write', (cb) => multi.commit(cb), [Code.BAD_VERSION, Code.NO_NODE]);
        if (set) return;
      }
    });
  }

  protected async readValue(resource: string): Promise<FencedValue | null> {
    const held = await this.#on((session) => this.#get(session, this.#pathFor(resource), 'fenced read'));
    return held ? { value: held.value, token: held.token } : null;
  }

  /** `fn` on the fence's session, which stays open while it runs. */
  async #on<T>(fn: (session: Session) => Promise<T>): Promise<T> {
    const session = await this.#sessions.session(this.#sessionTimeoutMs);
    this.#sessions.use(session);
    try {
      return await fn(session);
    } finally {
      this.#sessions.unuse(session);
    }
  }

  async #get(session: Session, path: string, operation: string): Promise<(FencedValue & { stat: Stat }) | undefined> {
    const got = await call<{ data: Buffer | undefined; stat: Stat }>(
      session,
      operation,
      (cb) => session.client.getData(path, undefined, (error, data, stat) => cb(error, { data, stat })),
      [Code.NO_NODE],
    );
    if (!got) return undefined;
    const text = (got.data ?? Buffer.alloc(0)).toString('utf8');
    const space = text.indexOf(' ');
    return { token: BigInt(text.slice(0, space)), value: text.slice(space + 1), stat: got.stat };
  }

  #pathFor(resource: string): string {
    return `${this.#root}/${Buffer.from(resource, 'utf8').toString('base64url')}`;
  }
}

/** A ZooKeeper fence. @throws InvalidArgumentError for bad options; store failures surface from its calls. */
export function zookeeperFence(options: ZooKeeperFenceOptions): ZooKeeperFence {
  return new ZooKeeperFence(options);
}
