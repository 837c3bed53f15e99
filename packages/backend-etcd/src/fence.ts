// Fenced writes in etcd: each resource is one key whose value starts with the highest token it
// accepted, as 38 zero-padded digits, so etcd's byte-wise value compare is a numeric one. A write
// is one transaction: if the stored value is below `<new token>!` (the token, then a byte above
// the space that follows every stored token), put; else read the key. etcd compares a missing
// key's value as false, so a first write is a second transaction that puts only if the key was
// never created; a lost race for that falls back to the compare.
import { StaleTokenError, type FencedValue } from '@deadbolt/core';
import { InFlight, readOptions, storeClient, StoreFence } from '@deadbolt/core/backend';
import type { Etcd3 } from 'etcd3';
import { etcdOptionRules, openEtcd, type EtcdBackendOptions } from './etcd-backend.js';
import { EtcdStore } from './store.js';

/**
 * Options of `etcdFence`: `etcdBackend`'s, with the same defaults; the fences' keys are
 * `<namespace>#f/<base64url resource>`. Unknown names and bad values are `InvalidArgumentError`
 * before any connection.
 */
export type EtcdFenceOptions = EtcdBackendOptions;

/** How each option of `etcdFence` is checked: as `etcdBackend`'s. */
export const etcdFenceOptionRules = etcdOptionRules;

const padded = (token: bigint) => token.toString().padStart(38, '0');

/** Values in etcd guarded by fencing tokens (see core's `Fence`). */
export class EtcdFence extends StoreFence {
  readonly client: Etcd3;
  readonly #store: EtcdStore;
  readonly #prefix: string;

  /** @throws InvalidArgumentError for bad options (before connecting). */
  constructor(raw: EtcdFenceOptions) {
    super('etcd');
    const options = readOptions(raw, etcdFenceOptionRules, 'etcdFence');
    const commandTimeout = options.commandTimeoutMs ?? 5000;
    const connection = storeClient(options, 'etcdFence', 'etcd://host:port[,host:port]', (url) =>
      openEtcd(url, { connectTimeout: options.connectTimeoutMs ?? 2000, commandTimeout }),
    );
    this.client = connection.client;
    this.closes(() => connection.end((client) => client.close()));
    this.#prefix = options.namespace ?? 'deadbolt/';
    this.#store = new EtcdStore(this.client, this.#prefix, new InFlight('etcd', commandTimeout));
  }

  /** One compare-and-put, and a create where the key is missing; again (until the deadline) when another writer created it first. */
  protected async writeValue(resource: string, token: bigint, value: string, deadline: AbortSignal): Promise<void> {
    const key = this.#keyFor(resource);
    const stored = `${padded(token)} ${value}`;
    for (;;) {
      deadline.throwIfAborted();
      const compared = await this.#store.call('fenced write', () =>
        this.client
          .if(key, 'Value', '<', `${padded(token)}!`)
          .then(this.client.put(key).value(stored))
          .else(this.client.get(key))
          .commit(),
      );
      if (compared.succeeded) return;
      const held = compared.responses[0]!.response_range.kvs[0];
      if (held) throw new StaleTokenError(resource, token, BigInt(held.value.toString().slice(0, 38)));
      const created = await this.#store.call('fenced write', () =>
        this.client.if(key, 'Create', '==', 0).then(this.client.put(key).value(stored)).commit(),
      );
      if (created.succeeded) return;
    }
  }

  protected async readValue(resource: string): Promise<FencedValue | null> {
    const held = await this.#store.call('fenced read', () => this.client.get(this.#keyFor(resource)).buffer());
    if (held === null) return null;
    const text = held.toString('utf8');
    return { token: BigInt(text.slice(0, 38)), value: text.slice(39) };
  }

  #keyFor(resource: string): string {
    return `${this.#prefix}#f/${Buffer.from(resource, 'utf8').toString('base64url')}`;
  }
}

/** An etcd fence. @throws InvalidArgumentError for bad options; store failures surface from its calls. */
export function etcdFence(options: EtcdFenceOptions): EtcdFence {
  return new EtcdFence(options);
}
