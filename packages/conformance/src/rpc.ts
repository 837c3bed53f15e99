/** A tiny request/response + event protocol over a Node IPC channel (structured clone, so bigints pass). */
import type { ChildProcess, Serializable } from 'node:child_process';
import type { EventEmitter } from 'node:events';

export interface Channel {
  send(message: unknown): boolean;
  on(event: 'message', listener: (message: unknown) => void): unknown;
}

/**
 * The IPC channel of `target`: a child's own `process`, or a child forked with one. Messages are
 * structured clones, so anything the protocol sends passes. @throws Error when it has none.
 */
export function ipcChannel(target: NodeJS.Process | ChildProcess): Channel {
  const send = target.send?.bind(target);
  if (!send) throw new Error('the process has no IPC channel (fork it, or spawn it with an ipc stdio)');
  const emitter: EventEmitter = target;
  return { send: (message) => send(message as Serializable), on: (event, listener) => emitter.on(event, listener) };
}

type Message =
  | { t: 'req'; id: number; method: string; args: unknown[] }
  | { t: 'res'; id: number; ok: true; value: unknown }
  | { t: 'res'; id: number; ok: false; error: { name: string; code?: string; message: string } }
  | { t: 'ev'; name: string; data: unknown };

// Each handler takes the arguments its caller sends (JSON over IPC); the caller and the handler
// agree on them, the channel cannot check them.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Handlers = Record<string, (...args: any[]) => unknown>;

export class Rpc {
  readonly #channel: Channel;
  readonly #handlers: Handlers;
  readonly #calls = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  readonly #eventListeners = new Set<(name: string, data: unknown) => void>();
  #nextId = 1;

  constructor(channel: Channel, handlers: Handlers) {
    this.#channel = channel;
    this.#handlers = handlers;
    channel.on('message', (raw) => void this.#receive(raw as Message));
  }

  call<T = unknown>(method: string, ...args: unknown[]): Promise<T> {
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      this.#calls.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.#channel.send({ t: 'req', id, method, args } satisfies Message);
    });
  }

  emit(name: string, data?: unknown): void {
    this.#channel.send({ t: 'ev', name, data } satisfies Message);
  }

  onEvent(listener: (name: string, data: unknown) => void): () => void {
    this.#eventListeners.add(listener);
    return () => this.#eventListeners.delete(listener);
  }

  /** Reject every call still waiting for an answer (the other side died). */
  failPending(error: Error): void {
    for (const call of this.#calls.values()) call.reject(error);
    this.#calls.clear();
  }

  async #receive(message: Message): Promise<void> {
    if (message.t === 'ev') {
      for (const listener of this.#eventListeners) listener(message.name, message.data);
      return;
    }
    if (message.t === 'res') {
      const call = this.#calls.get(message.id);
      if (!call) return;
      this.#calls.delete(message.id);
      if (message.ok) call.resolve(message.value);
      else call.reject(Object.assign(new Error(message.error.message), message.error));
      return;
    }
    const handler = this.#handlers[message.method];
    try {
      if (!handler) throw new Error(`no handler for ${message.method}`);
      const value = await handler(...message.args);
      this.#channel.send({ t: 'res', id: message.id, ok: true, value } satisfies Message);
    } catch (e) {
      const error = e as Error & { code?: string };
      this.#channel.send({
        t: 'res',
        id: message.id,
        ok: false,
        error: { name: error.name, code: error.code, message: error.message },
      } satisfies Message);
    }
  }
}
