import { Once, readOptions, rules, wallMicros, type Rules } from '@deadbolt/core/backend';
import cassandra, { type Client } from 'cassandra-driver';

/** Options of `CassandraTimeService`. */
export interface TimeServiceOptions {
  /** How often the GlobalTime cell is read and, if our clock is ahead of it, advanced. Default 500 ms. */
  intervalMs?: number;
  /**
   * The furthest ahead of this machine's clock a GlobalTime value is believed. A machine whose clock
   * runs ahead drags GlobalTime with it; beyond this bound we count from our own clock plus the bound,
   * so a runaway clock can reorder waiters by at most this much. Default 1000 ms.
   */
  maxAheadMs?: number;
}

/** How each option of the time service is checked (`cassandraBackend`'s `timeService` too). */
export const timeServiceOptionRules = { intervalMs: rules.ms(10), maxAheadMs: rules.ms(0) } satisfies Rules<TimeServiceOptions>;

const QUORUM = cassandra.types.consistencies.quorum;

/**
 * The seed's time service: a `GlobalTime` cell whose value equals its write timestamp. Every
 * participant reads it in the background and, when its own clock is ahead, writes its clock there
 * (value = write timestamp), so last-write-wins keeps the cell non-decreasing. `now()` is
 * max(own clock, GlobalTime + time since it was read), strictly increasing within the process, so
 * queue entries from a machine whose clock lags still sort after entries made before them
 * elsewhere. Usable on its own: `start()`, `now()`, `stop()`.
 */
export class CassandraTimeService {
  readonly #client: Client;
  readonly #keyspace: string;
  readonly #intervalMs: number;
  readonly #maxAheadMicros: number;
  #global = 0;
  #readAt = 0;
  #last = 0;
  #timer: NodeJS.Timeout | undefined;
  /** The first read: `start()` resolves after it, and runs it again if it failed. */
  #first = new Once(() => this.tick());

  /** @throws InvalidArgumentError for bad options. */
  constructor(client: Client, keyspace: string, options: TimeServiceOptions = {}) {
    this.#client = client;
    this.#keyspace = keyspace;
    const read = readOptions(options, timeServiceOptionRules, 'CassandraTimeService');
    this.#intervalMs = read.intervalMs ?? 500;
    this.#maxAheadMicros = (read.maxAheadMs ?? 1000) * 1000;
  }

  /**
   * Starts the background task; resolves after the first read. @throws the driver's error on that
   * read; the next `start()` reads again (a first read cut by a reset does not fail it for good).
   */
  start(): Promise<void> {
    if (!this.#timer) {
      this.#timer = setInterval(() => void this.tick().catch(() => undefined), this.#intervalMs);
      this.#timer.unref();
    }
    return this.#first.run();
  }

  /** Stops the periodic read and advance of the GlobalTime cell. Never throws. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#first = new Once(() => this.tick());
  }

  /** One round: read GlobalTime; if our clock is ahead, write it (value = timestamp = our clock). */
  async tick(): Promise<void> {
    const result = await this.#client.execute(`SELECT micros FROM ${this.#keyspace}.global_time WHERE id = 'GlobalTime'`, [], {
      prepare: true,
      consistency: QUORUM,
    });
    const value = Number(String(result.first()?.['micros'] ?? 0));
    const local = wallMicros();
    this.#readAt = performance.now();
    this.#global = Math.min(value, local + this.#maxAheadMicros);
    if (local > value) {
      await this.#client.execute(
        `UPDATE ${this.#keyspace}.global_time USING TIMESTAMP ? SET micros = ? WHERE id = 'GlobalTime'`,
        [String(local), String(local)],
        {
          prepare: true,
          consistency: QUORUM,
        },
      );
      this.#global = Math.max(this.#global, local);
    }
  }

  /** Microseconds, non-decreasing across participants and strictly increasing in this process. */
  now(): number {
    const global = this.#global + Math.floor((performance.now() - this.#readAt) * 1000);
    this.#last = Math.max(this.#last + 1, wallMicros(), this.#readAt ? global : 0);
    return this.#last;
  }
}
