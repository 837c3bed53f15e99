import { createConnection, createServer, type Server, type Socket } from 'node:net';

/** Where a store listens. */
export interface Address {
  readonly host: string;
  readonly port: number;
}

/** One client connection and the proxy's own connection to the store behind it. */
interface Pipe {
  readonly client: Socket;
  readonly upstream: Socket;
}

/** A connection accepted during a blackhole, and where it was headed. */
interface Parked {
  readonly client: Socket;
  readonly target: Address;
}

/**
 * A loopback TCP proxy between a client and a real store that stages the network faults
 * production has: `delay` (every chunk arrives late, in order), `blackhole` (a silent partition:
 * nothing is forwarded and no socket is closed, so both ends see a peer that stopped answering;
 * held data is delivered on `heal`, as TCP would after a partition ends), `muteReplies` (requests
 * still reach the store, its answers are held until `heal`: a write that lands while its reply
 * is lost), `strand` (the connections open now go silent for good, new ones pass),
 * `slowHandshake` (new connections are accepted at once and answered late), `reset` (every
 * connection is cut with a TCP RST) and `refuse` (the same, and every new connection too, until
 * `heal`: a store host that is down). It listens on 127.0.0.1 only
 * and forwards only to its targets: one listener per target, for a store of several nodes (a
 * Redis Cluster), every fault applying to all of them at once.
 */
export class FaultProxy {
  readonly #servers: Server[] = [];
  readonly #pipes = new Set<Pipe>();
  #delayMs = 0;
  #silent = false;
  /** The store's answers are held (requests still go through) until `heal`. */
  #muted = false;
  /** Connections accepted during a blackhole, connected upstream on heal. */
  #parked: Parked[] = [];
  /** Connections silent for good (`strand`): never forwarded again, cut by `reset` and `close`. */
  readonly #stranded = new Set<Pipe>();
  /** New connections forward nothing, either way, for this long after they are accepted (`slowHandshake`). */
  #handshakeDelayMs = 0;
  #handshakeEvery = 1;
  /** Connections accepted so far. */
  #accepted = 0;
  /** Every connection is cut with a TCP reset as soon as it is accepted, until `heal`. */
  #refusing = false;

  private constructor() {}

  /** Starts a proxy to `target` (or one listener for each of several targets) on free loopback ports. */
  static async start(target: Address | readonly Address[]): Promise<FaultProxy> {
    const proxy = new FaultProxy();
    for (const each of Array.isArray(target) ? target : [target as Address]) {
      const server = createServer({ noDelay: true });
      proxy.#servers.push(server);
      server.on('connection', (client) => proxy.#accept(client, each));
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, '127.0.0.1', () => resolve());
      });
    }
    return proxy;
  }

  /** Where clients connect (the first target's listener). */
  get address(): Address {
    return this.addresses[0]!;
  }

  /** Where clients connect, one listener per target, in the targets' order. */
  get addresses(): Address[] {
    return this.#servers.map((server) => ({ host: '127.0.0.1', port: (server.address() as { port: number }).port }));
  }

  /** `host:port` of the proxy, for building a store URL. */
  get hostPort(): string {
    return `${this.address.host}:${this.address.port}`;
  }

  /** Open client connections. */
  get connections(): number {
    return this.#pipes.size + this.#parked.length;
  }

  /** Connections accepted since the proxy started (a check that nothing connected at all). */
  get accepted(): number {
    return this.#accepted;
  }

  /**
   * Each connection accepted from now on (with `every` = n, each n-th of them) forwards nothing, in
   * either direction, for `ms` after it was accepted (a slow handshake: a store or middlebox that
   * accepts at once and answers late, or a server too busy to start every session in time); then
   * it passes. Open connections are not affected. 0 turns it off.
   */
  slowHandshake(ms: number, every = 1): void {
    this.#handshakeDelayMs = ms;
    this.#handshakeEvery = every;
  }

  /** Every chunk, both ways, is forwarded `ms` after it arrives (order kept). 0 forwards at once. */
  delay(ms: number): void {
    this.#delayMs = ms;
  }

  /** Stop forwarding in both directions without closing anything, until `heal()`. */
  blackhole(): void {
    this.#silent = true;
    for (const { client, upstream } of this.#pipes) {
      client.pause();
      upstream.pause();
    }
  }

  /**
   * Requests still reach the store, but its answers are held, without closing anything, until
   * `heal()`: the store carries out a call whose reply the client never gets in time.
   */
  muteReplies(): void {
    this.#muted = true;
    for (const { upstream } of this.#pipes) upstream.pause();
  }

  /**
   * The connections open now go silent for good, nothing forwarded and nothing closed (a middlebox
   * that lost their state, a store host gone without a reset), while new connections pass. The
   * client has to notice and open new ones; `heal()` does not revive these, and neither end learns
   * when the other closes.
   */
  strand(): void {
    for (const pipe of this.#pipes) {
      pipe.client.pause();
      pipe.upstream.pause();
      this.#stranded.add(pipe);
    }
    this.#pipes.clear();
  }

  /**
   * Cut every open connection with a TCP reset and every new one as soon as it is accepted, until
   * `heal()`: the store's host is down, or its port closed. Every call fails at once.
   */
  refuse(): void {
    this.#refusing = true;
    this.reset();
  }

  /** Forward again (held data first) and connect the connections accepted meanwhile. */
  heal(): void {
    this.#refusing = false;
    this.#silent = false;
    this.#muted = false;
    this.#delayMs = 0;
    this.#handshakeDelayMs = 0;
    for (const { client, upstream } of this.#pipes) {
      client.resume();
      upstream.resume();
    }
    const parked = this.#parked;
    this.#parked = [];
    for (const { client, target } of parked) if (!client.destroyed) this.#connect(client, target);
  }

  /** Cut every open connection with a TCP reset, as a restarted middlebox or peer does. */
  reset(): void {
    for (const { client, upstream } of [...this.#pipes, ...this.#stranded]) {
      client.resetAndDestroy();
      upstream.destroy();
    }
    this.#pipes.clear();
    this.#stranded.clear();
    for (const { client } of this.#parked.splice(0)) client.resetAndDestroy();
  }

  /** Heals, closes every connection and stops listening. */
  async close(): Promise<void> {
    this.reset();
    await Promise.all(this.#servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
  }

  #accept(client: Socket, target: Address): void {
    this.#accepted++;
    client.on('error', () => undefined);
    if (this.#refusing) {
      client.resetAndDestroy();
      return;
    }
    if (this.#handshakeDelayMs > 0 && this.#accepted % this.#handshakeEvery === 0) {
      client.pause();
      const ms = this.#handshakeDelayMs;
      setTimeout(() => {
        if (!client.destroyed) this.#admit(client, target);
      }, ms);
      return;
    }
    this.#admit(client, target);
  }

  #admit(client: Socket, target: Address): void {
    if (this.#silent) {
      client.pause();
      this.#parked.push({ client, target });
      return;
    }
    this.#connect(client, target);
  }

  #connect(client: Socket, target: Address): void {
    const upstream = createConnection({ host: target.host, port: target.port, noDelay: true });
    const pipe: Pipe = { client, upstream };
    this.#pipes.add(pipe);
    upstream.on('error', () => undefined);
    const end = () => {
      // A stranded end learns nothing, not even that the other end closed: the middlebox that lost
      // the connection's state drops that too.
      if (!this.#pipes.delete(pipe)) return;
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end);
    upstream.on('close', end);
    this.#forward(client, upstream);
    this.#forward(upstream, client);
    // A connection parked during a blackhole was paused; adding a 'data' listener does not undo an
    // explicit pause, so it has to be resumed here, or it would stay silent after the heal.
    if (this.#silent) client.pause();
    else client.resume();
    if (this.#silent || this.#muted) upstream.pause();
  }

  /** Copies `from` to `to`, each chunk after the current delay, never overtaking an earlier one. */
  #forward(from: Socket, to: Socket): void {
    let last = 0;
    from.on('data', (chunk: Buffer) => {
      if (this.#delayMs <= 0 && last <= performance.now()) {
        to.write(chunk);
        return;
      }
      const at = Math.max(last, performance.now() + this.#delayMs);
      last = at;
      setTimeout(() => {
        if (!to.destroyed) to.write(chunk);
      }, at - performance.now());
    });
  }
}
