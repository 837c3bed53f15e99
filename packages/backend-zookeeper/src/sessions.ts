// ZooKeeper sessions: one per distinct ttl (the session timeout is the lease), shared by every lock
// and waiter with that ttl, closed when idle, and ended (never resumed) the moment its connection
// is lost: the standard connection policy, see the backend's comment.
import { setMaxListeners } from 'node:events';
import type { Socket } from 'node:net';
import { BackendError, BackendUnavailableError, LockerClosedError } from '@deadbolt/core';
import { connectionRefused } from '@deadbolt/core/backend';
import { createClient, type ZooKeeperClient } from './zookeeper-client.js';

/** The backend's name, for errors. */
export const NAME = 'zookeeper';

/** One ZooKeeper session; its timeout is the ttl of every lease taken through it. */
export interface ZooKeeperSession {
  readonly client: ZooKeeperClient;
  readonly ttlMs: number;
  /** Aborts when the session can no longer be counted on: connection lost, expired or closed. */
  readonly lost: AbortSignal;
}

export interface Session extends ZooKeeperSession {
  readonly ready: Promise<void>;
  readonly end: (reason: Error) => void;
  /** Acquisitions and leases using the session; at 0 it closes after SESSION_IDLE_MS. */
  users: number;
  idle: NodeJS.Timeout | undefined;
}

/**
 * An idle session (no lock held or awaited through it) closes after this long, so a process that
 * used many ttls does not keep a session, and its server-side state and heartbeats, for each.
 */
const SESSION_IDLE_MS = 2000;

/**
 * node-zookeeper-client pings a quiet connection every third of the session timeout but never
 * checks that the pings are answered: a connection that went silent for good (a partition, a
 * middlebox that lost its state: no reset, no close) would stay "connected" for ever, and a waiter
 * on it would never hear its turn. Like ZooKeeper's own clients, this cuts the connection once
 * nothing has been read on it for `silentMs` while connected (two thirds of the session timeout);
 * the client then reports it lost and connects again. Returns how to stop watching.
 */
function cutWhenSilent(client: ZooKeeperClient, silentMs: number, connected: () => boolean): () => void {
  const manager = client.connectionManager;
  let socket: Socket | undefined;
  let bytes = 0;
  let since = performance.now();
  const timer = setInterval(() => {
    const now = manager?.socket;
    if (!now || !connected() || now !== socket || now.bytesRead !== bytes) {
      socket = now;
      bytes = now?.bytesRead ?? 0;
      since = performance.now();
    } else if (performance.now() - since >= silentMs) {
      now.destroy();
    }
  }, silentMs / 4);
  timer.unref();
  return () => clearInterval(timer);
}

export class ZooKeeperSessions {
  readonly #hosts: string;
  /** `user:password` from the url, added to every session as digest authentication. */
  readonly #auth: Buffer | undefined;
  readonly #connectTimeoutMs: number;
  readonly #sessions = new Map<number, Session>();
  #closed = false;

  constructor(hosts: string, auth: Buffer | undefined, connectTimeoutMs: number) {
    this.#hosts = hosts;
    this.#auth = auth;
    this.#connectTimeoutMs = connectTimeoutMs;
  }

  /** Sessions currently open. */
  open(): ZooKeeperSession[] {
    return [...this.#sessions.values()].filter((s) => !s.lost.aborted);
  }

  /**
   * The session whose timeout is `ttlMs`, connected; every lock with that ttl shares it.
   * @throws LockerClosedError once the backend is closed; BackendUnavailableError when no session connects in time; BackendError when the server
   * will not grant that timeout.
   */
  async session(ttlMs: number): Promise<Session> {
    if (this.#closed) throw new LockerClosedError('the zookeeper backend is closed');
    let session = this.#sessions.get(ttlMs);
    if (!session || session.lost.aborted) {
      session = this.#connect(ttlMs);
      this.#sessions.set(ttlMs, session);
    }
    await session.ready;
    return session;
  }

  /** One more acquisition or lease uses `session`: it stays open. */
  use(session: Session): void {
    session.users++;
    clearTimeout(session.idle);
    session.idle = undefined;
  }

  /** One fewer uses `session`: with none left, it closes after SESSION_IDLE_MS. */
  unuse(session: Session): void {
    if (--session.users > 0 || session.lost.aborted) return;
    clearTimeout(session.idle);
    session.idle = setTimeout(() => session.users === 0 && session.end(new Error('the session was idle')), SESSION_IDLE_MS);
    session.idle.unref();
  }

  #connect(ttlMs: number): Session {
    // Before the session: every server refusing the connection (a closed port, a host that is
    // down: core's `connectionRefused`) fails the connect at once with the socket's error, rather
    // than at the timeout without it. Other socket errors (a reset) wait for the timeout.
    const servers = this.#hosts.split('/')[0]!.split(',').length;
    let connected = false;
    let closed = false;
    let failConnect: ((error: Error) => void) | undefined;
    let refused = 0;
    let lastSocketError: Error | undefined;
    const client = createClient(this.#hosts, { sessionTimeout: ttlMs, spinDelay: 100, retries: 0 }, (error) => {
      lastSocketError = error;
      if (!connected && connectionRefused(error) && ++refused >= servers)
        failConnect?.(new BackendUnavailableError(NAME, 'connect', { cause: error }));
    });
    if (this.#auth) client.addAuthInfo('digest', this.#auth);
    const controller = new AbortController();
    setMaxListeners(0, controller.signal); // every lock and waiter on the session listens to it
    const stopWatchdog = cutWhenSilent(client, (2 * ttlMs) / 3, () => connected);
    const close = () => {
      if (closed) return;
      closed = true;
      stopWatchdog();
      client.close();
    };
    /** Stops using the session; closes it now if connected, else once it reconnects (see below). */
    const end = (reason: Error) => {
      clearTimeout(session.idle);
      controller.abort(reason);
      if (this.#sessions.get(ttlMs) === session) this.#sessions.delete(ttlMs);
      if (connected || this.#closed) close();
    };
    const ready = new Promise<void>((resolve, reject) => {
      let settled = false;
      const fail = (error: Error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        end(error);
        close(); // the handshake never finished: no session to let expire
        reject(error);
      };
      failConnect = fail;
      const timer = setTimeout(() => {
        const last = lastSocketError ? ` (last socket error: ${lastSocketError.message})` : '';
        fail(new BackendUnavailableError(NAME, 'connect', { cause: new Error(`no session within ${this.#connectTimeoutMs} ms${last}`) }));
      }, this.#connectTimeoutMs);
      client.once('connected', () => {
        const granted = client.getSessionTimeout();
        if (granted !== ttlMs) {
          const cause = new Error(
            `the server granted a ${granted} ms session for a ${ttlMs} ms ttl; use a ttl within its minSessionTimeout..maxSessionTimeout`,
          );
          return fail(new BackendError(NAME, 'connect', { cause }));
        }
        settled = true;
        clearTimeout(timer);
        resolve();
      });
      controller.signal.addEventListener('abort', () =>
        fail(new BackendUnavailableError(NAME, 'connect', { cause: controller.signal.reason })),
      );
    });
    ready.catch(() => undefined);
    // Standard policy: a suspended connection means ownership is uncertain, so its locks are lost
    // at once. The client is closed only once it has reconnected: a close queued while it is
    // disconnected does not end the session (the client resumes it and keeps it alive), whereas a
    // close on a live connection makes the server delete our nodes right away.
    client.on('connected', () => {
      connected = true;
      // Outside the client's own state change, which would otherwise overwrite the closing state.
      if (controller.signal.aborted) setImmediate(close);
    });
    client.on('disconnected', () => {
      connected = false;
      end(new Error('the ZooKeeper connection was lost'));
    });
    client.on('expired', () => {
      end(new Error('the ZooKeeper session expired'));
      close();
    });
    client.on('authenticationFailed', () => {
      end(new Error('ZooKeeper authentication failed'));
      close();
    });
    const session: Session = { client, ttlMs, lost: controller.signal, ready, end, users: 0, idle: undefined };
    client.connect();
    return session;
  }

  /** Ends every session (the server deletes their nodes); later calls to `session` fail. */
  close(): void {
    this.#closed = true;
    for (const session of [...this.#sessions.values()]) session.end(new Error('the backend was closed'));
  }
}
