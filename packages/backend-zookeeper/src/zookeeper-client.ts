import { createRequire } from 'node:module';
import type { Socket } from 'node:net';

/** The part of node-zookeeper-client's API this backend uses (callback style). */
export interface ZooKeeperClient {
  connect(): void;
  close(): void;
  on(event: 'connected' | 'disconnected' | 'expired' | 'authenticationFailed', listener: () => void): unknown;
  once(event: 'connected', listener: () => void): unknown;
  getSessionId(): Buffer;
  getSessionPassword(): Buffer;
  getSessionTimeout(): number;
  create(path: string, data: Buffer, mode: number, cb: (error: ZooKeeperError | null, path: string) => void): void;
  exists(path: string, watcher: WatchListener | undefined, cb: (error: ZooKeeperError | null, stat: Stat | null) => void): void;
  /** The children and, read with them in one step, the node's own stat. */
  getChildren(
    path: string,
    watcher: WatchListener | undefined,
    cb: (error: ZooKeeperError | null, children: string[], stat?: Stat) => void,
  ): void;
  getData(
    path: string,
    watcher: WatchListener | undefined,
    cb: (error: ZooKeeperError | null, data: Buffer | undefined, stat: Stat) => void,
  ): void;
  remove(path: string, version: number, cb: (error: ZooKeeperError | null) => void): void;
  /** A multi-op: all of its operations apply, or none (the error is the first failing one's). */
  transaction(): Transaction;
  /** Adds `scheme:auth` to the session (the digest scheme takes `user:password`). */
  addAuthInfo(scheme: string, auth: Buffer): void;
  /**
   * Not part of the library's documented API (checked on 1.1.x): the object that owns the socket.
   * `createClient` guards its reader and hears its socket errors, and `cutWhenSilent` watches its
   * socket; each does nothing if a later version has none.
   */
  readonly connectionManager?: ConnectionManager;
}

/**
 * A multi-op. Versions are exact, 0 included, and -1 is any version: `createClient` makes it so
 * (node-zookeeper-client's own reads `version || -1`, so a node at its first version, 0, would
 * match anything and a conditional write would be unconditional).
 */
export interface Transaction {
  check(path: string, version?: number): Transaction;
  create(path: string, data: Buffer, mode: number): Transaction;
  setData(path: string, data: Buffer, version?: number): Transaction;
  remove(path: string, version?: number): Transaction;
  commit(cb: (error: ZooKeeperError | null, results: unknown[]) => void): void;
}

export type WatchListener = (event: { getType(): number; getPath(): string }) => void;

export interface ZooKeeperError extends Error {
  getCode(): number;
}

export interface Stat {
  /** The zxid of the create, 8 bytes big-endian. */
  readonly czxid: Buffer;
  /** The version of the node's data (0 when made, one more with each setData). */
  readonly version: number;
}

export interface ClientOptions {
  sessionTimeout: number;
  spinDelay?: number;
  retries?: number;
  sessionId?: Buffer;
  sessionPassword?: Buffer;
}

interface ZooKeeperModule {
  createClient(connectionString: string, options: ClientOptions): ZooKeeperClient;
  readonly CreateMode: { readonly PERSISTENT: number; readonly EPHEMERAL_SEQUENTIAL: number };
  readonly Exception: Record<string, number>;
  readonly Event: { readonly NODE_DELETED: number };
}

// CommonJS without bundled types: load it through require and type the calls we make.
const zookeeper = createRequire(import.meta.url)('node-zookeeper-client') as ZooKeeperModule;

/**
 * A client whose protocol surprises end its connection, never the process. node-zookeeper-client
 * reads every answer inside its socket's 'data' handler and throws from there on anything it does
 * not expect: a server's late answer to a handshake the client has stopped waiting for (closed
 * before its session came) arrives in its closing state, is read as a reply with an unknown error
 * code, and the throw is an uncaught exception that ends the user's process. Here such an error
 * cuts the connection instead, which the client treats as a connection loss (its requests fail
 * with CONNECTION_LOSS, and a closing client stops).
 */
export function createClient(connectionString: string, options: ClientOptions, onSocketError?: (error: Error) => void): ZooKeeperClient {
  const client = zookeeper.createClient(connectionString, options);
  const transaction = client.transaction.bind(client);
  client.transaction = () => exactVersions(transaction());
  const manager = client.connectionManager;
  const read = manager?.onSocketData;
  if (manager && typeof read === 'function') {
    manager.onSocketData = function (this: ConnectionManager, buffer: Buffer) {
      try {
        read.call(this, buffer);
      } catch {
        this.pendingBuffer = null;
        this.socket?.destroy();
      }
    };
  }
  // The library drops a socket's error (it only tries the next server); `onSocketError` hears it,
  // so that a refused connection can be told apart from a server that does not answer.
  const dropped = manager?.onSocketError;
  if (manager && onSocketError && typeof dropped === 'function') {
    manager.onSocketError = function (this: ConnectionManager, error: Error) {
      onSocketError(error);
      dropped.call(this, error);
    };
  }
  return client;
}

/**
 * `transaction` with exact versions: each versioned operation is added as the library adds it, then
 * given back the version asked for (the library stores `version || -1` in the operation it queues,
 * `ops`, which `commit` sends as it is). Checked on 1.1.x; a library without `ops` is refused at the
 * first multi-op rather than sending writes that would match any version.
 */
function exactVersions(raw: Transaction): Transaction {
  const ops = (raw as Transaction & { ops?: { version?: number }[] }).ops;
  if (!Array.isArray(ops))
    throw new Error('node-zookeeper-client: a transaction without its list of operations cannot carry exact versions');
  const exact = (version: number | undefined) => {
    if (version !== undefined) ops.at(-1)!.version = version;
  };
  const tx: Transaction = {
    check: (path, version) => (raw.check(path, version), exact(version), tx),
    create: (path, data, mode) => (raw.create(path, data, mode), tx),
    setData: (path, data, version) => (raw.setData(path, data, version), exact(version), tx),
    remove: (path, version) => (raw.remove(path, version), exact(version), tx),
    commit: (cb) => raw.commit(cb),
  };
  return tx;
}

/** The parts of node-zookeeper-client's connection manager this package uses. */
export interface ConnectionManager {
  onSocketData?: (buffer: Buffer) => void;
  onSocketError?: (error: Error) => void;
  pendingBuffer: Buffer | null;
  socket?: Socket;
}
export const CreateMode = zookeeper.CreateMode;
export const NODE_DELETED = zookeeper.Event.NODE_DELETED;
const X = zookeeper.Exception;
export const Code = { NO_NODE: X.NO_NODE!, NODE_EXISTS: X.NODE_EXISTS!, NOT_EMPTY: X.NOT_EMPTY!, BAD_VERSION: X.BAD_VERSION! } as const;

/** Codes that mean the session or its connection is gone, not that the request was wrong. */
const UNAVAILABLE = new Set([X.CONNECTION_LOSS, X.OPERATION_TIMEOUT, X.SESSION_EXPIRED, X.SESSION_MOVED]);

/** The ZooKeeper error code of `error`, or undefined for anything else. */
export function codeOf(error: unknown): number | undefined {
  return typeof (error as ZooKeeperError)?.getCode === 'function' ? (error as ZooKeeperError).getCode() : undefined;
}

/** True when `error` says the connection or session is gone. */
export function isUnavailable(error: unknown): boolean {
  const code = codeOf(error);
  return code !== undefined && UNAVAILABLE.has(code);
}

/** The creation zxid of a node as a bigint (64-bit, strictly increasing across the ensemble). */
export function zxidOf(stat: Stat): bigint {
  return stat.czxid.readBigInt64BE(0);
}

/** Promise form of one callback call; `accept` lists error codes that resolve with `undefined`. */
export function zk<T>(
  start: (cb: (error: ZooKeeperError | null, result?: T) => void) => void,
  accept: readonly number[] = [],
): Promise<T | undefined> {
  return new Promise((resolve, reject) => {
    try {
      start((error, result) => {
        if (!error) resolve(result);
        else if (accept.includes(error.getCode())) resolve(undefined);
        else reject(error);
      });
    } catch (error) {
      // The client throws synchronously for requests it cannot send (bad state, bad argument).
      reject(error);
    }
  });
}
