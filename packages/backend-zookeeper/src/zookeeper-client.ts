import { createRequire } from 'node:module';

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
  getChildren(path: string, watcher: WatchListener | undefined, cb: (error: ZooKeeperError | null, children: string[]) => void): void;
  remove(path: string, version: number, cb: (error: ZooKeeperError | null) => void): void;
  /** A multi-op: all of its operations apply, or none (the error is the first failing one's). */
  transaction(): Transaction;
}

export interface Transaction {
  check(path: string): Transaction;
  create(path: string, data: Buffer, mode: number): Transaction;
  remove(path: string): Transaction;
  commit(cb: (error: ZooKeeperError | null, results: unknown[]) => void): void;
}

export type WatchListener = (event: { getType(): number; getPath(): string }) => void;

export interface ZooKeeperError extends Error {
  getCode(): number;
}

export interface Stat {
  /** The zxid of the create, 8 bytes big-endian. */
  readonly czxid: Buffer;
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

export const createClient = zookeeper.createClient;
export const CreateMode = zookeeper.CreateMode;
export const NODE_DELETED = zookeeper.Event.NODE_DELETED;
const X = zookeeper.Exception;
export const Code = { NO_NODE: X.NO_NODE!, NODE_EXISTS: X.NODE_EXISTS!, NOT_EMPTY: X.NOT_EMPTY! } as const;

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
export function zk<T>(start: (cb: (error: ZooKeeperError | null, result?: T) => void) => void, accept: readonly number[] = []): Promise<T | undefined> {
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
