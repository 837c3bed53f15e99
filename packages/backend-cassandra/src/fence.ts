// Fenced writes in Cassandra: a table of resources, each with the highest token it accepted. A
// write is a lightweight transaction (Paxos) that updates only if the stored token is not above
// the new one; a first write inserts if the row does not exist, and a lost race for that goes
// back to the update. Reads are at the serial consistency, so they see every write the
// transactions decided.
import { StaleTokenError, type FencedValue } from '@deadbolt/core';
import { InFlight, Once, readOptions, rules, StoreFence, type Rules } from '@deadbolt/core/backend';
import cassandra, { type Client, type policies } from 'cassandra-driver';
import {
  cassandraConnection,
  cassandraOptionRules,
  COMMAND_TIMEOUT_MS,
  keyspaceOf,
  keyspaceRule,
  schemaScope,
} from './cassandra-backend.js';
import { ensureSchema } from './schema.js';
import { CassandraStore } from './store.js';

/** Options of `cassandraFence`: where the fenced resources are kept. Unknown names and bad values are `InvalidArgumentError` before any connection. */
export interface CassandraFenceOptions {
  /** `cassandra://host[:port][,host[:port]…]/keyspace`. The fence makes and closes its client. */
  url?: string;
  /** Your own cassandra-driver client instead of `url`; `close()` leaves it open. */
  client?: Client;
  /** What keeps these fences apart from others on the same cluster: the keyspace of their `fences` table, with `client`, or with a `url` without a path (a url whose path names another keyspace is refused). Default `deadbolt`. */
  namespace?: string;
  /** Another name for `namespace` (Cassandra's word for it); give one of the two. */
  keyspace?: string;
  /** Replication of the keyspace if the fence creates it. Default SimpleStrategy, RF 1: give RF ≥ 3 in production. */
  replication?: string;
  /** With `url`: the local data center. Default `datacenter1`. */
  localDataCenter?: string;
  /** With `url`: the driver's address translator (see the backend's option). Default none. */
  addressTranslator?: policies.addressResolution.AddressTranslator;
  /** With `url`: connect timeout. Default 2000 ms. */
  connectTimeoutMs?: number;
  /** With `url`: the longest a request waits for its answer. Default 8000 ms. */
  commandTimeoutMs?: number;
}

/** How each option of `cassandraFence` is checked. */
export const cassandraFenceOptionRules = {
  url: rules.url(['cassandra']),
  client: cassandraOptionRules.client,
  namespace: keyspaceRule,
  keyspace: rules.alias('namespace', keyspaceRule),
  replication: cassandraOptionRules.replication,
  localDataCenter: cassandraOptionRules.localDataCenter,
  addressTranslator: cassandraOptionRules.addressTranslator,
  connectTimeoutMs: rules.ms(),
  commandTimeoutMs: rules.ms(),
} satisfies Rules<CassandraFenceOptions>;

const { consistencies } = cassandra.types;
const varint = (token: bigint) => cassandra.types.Integer.fromString(token.toString());
const toToken = (value: unknown) => BigInt(String(value));

/** Values in Cassandra guarded by fencing tokens (see core's `Fence`). */
export class CassandraFence extends StoreFence {
  readonly client: Client;
  readonly #store: CassandraStore;
  readonly #table: string;
  readonly #ready: Once;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: CassandraFenceOptions) {
    super('cassandra');
    const options = readOptions(raw, cassandraFenceOptionRules, 'cassandraFence');
    const keyspace = keyspaceOf(options, 'cassandraFence');
    const commandTimeout = options.commandTimeoutMs ?? COMMAND_TIMEOUT_MS;
    const connection = cassandraConnection(options, 'cassandraFence');
    this.client = connection.client;
    this.closes(() => connection.end((client) => client.shutdown()));
    this.#table = `${keyspace}.fences`;
    this.#store = new CassandraStore({
      name: 'cassandra',
      client: this.client,
      keyspace,
      consistency: consistencies.quorum,
      serial: consistencies.serial,
      poll: { minDelayMs: 2, maxDelayMs: 50 },
      inFlight: new InFlight('cassandra', commandTimeout),
    });
    const scope = schemaScope(connection);
    const replication = options.replication ?? "{'class': 'SimpleStrategy', 'replication_factor': 1}";
    this.#ready = new Once(async () => {
      try {
        await this.client.connect();
        await ensureSchema(this.client, scope, keyspace, replication);
      } catch (error) {
        throw this.#store.error('connect', error);
      }
    });
  }

  /** A conditional update, and an insert where the row is missing; again (until the deadline) when another writer inserted it first. */
  protected async writeValue(resource: string, token: bigint, value: string, deadline: AbortSignal): Promise<void> {
    await this.#ready.run();
    const id = Buffer.from(resource, 'utf8');
    for (;;) {
      deadline.throwIfAborted();
      const updated = (
        await this.#store.run(
          'fenced write',
          `UPDATE ${this.#table} SET fence_token = ?, value = ? WHERE resource = ? IF fence_token <= ?`,
          [varint(token), value, id, varint(token)],
          {
            lwt: true,
          },
        )
      ).first();
      if (updated?.['[applied]'] === true) return;
      const held = updated?.['fence_token'];
      if (held !== null && held !== undefined) throw new StaleTokenError(resource, token, toToken(held));
      // No row yet: create it, unless another writer just did (then compare with theirs).
      const inserted = (
        await this.#store.run(
          'fenced write',
          `INSERT INTO ${this.#table} (resource, fence_token, value) VALUES (?, ?, ?) IF NOT EXISTS`,
          [id, varint(token), value],
          {
            lwt: true,
          },
        )
      ).first();
      if (inserted?.['[applied]'] === true) return;
    }
  }

  protected async readValue(resource: string): Promise<FencedValue | null> {
    await this.#ready.run();
    const row = (
      await this.#store.run(
        'fenced read',
        `SELECT fence_token, value FROM ${this.#table} WHERE resource = ?`,
        [Buffer.from(resource, 'utf8')],
        {
          serialRead: true,
        },
      )
    ).first();
    return row ? { value: (row['value'] as string | null) ?? '', token: toToken(row['fence_token']) } : null;
  }
}

/** A Cassandra fence. @throws InvalidArgumentError for bad options; store failures surface from its calls. */
export function cassandraFence(options: CassandraFenceOptions): CassandraFence {
  return new CassandraFence(options);
}
