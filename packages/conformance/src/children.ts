import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { LockerOptions, LockOptions } from '@deadbolt/core';
import { ipcChannel, Rpc, type Handlers } from './rpc.js';
import type { SharedFamily } from './shared-family.js';

/** How a child process builds the backend under test: `(await import(module))[export](options)`. */
export interface ChildBackendConfig {
  /** Absolute file URL of an ESM module (the backend package's built entry). */
  module: string;
  export: string;
  /** Structured-cloneable options for the factory. */
  options?: unknown;
}

const childEntry = fileURLToPath(new URL('./child.js', import.meta.url));

/** A holder process under the suite's control. */
export class ChildHolder {
  readonly process: ChildProcess;
  readonly rpc: Rpc;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly events: { name: string; data: unknown }[] = [];

  private constructor(process: ChildProcess, handlers: Handlers) {
    this.process = process;
    this.rpc = new Rpc(ipcChannel(process), handlers);
    this.rpc.onEvent((name, data) => this.events.push({ name, data }));
    this.exited = new Promise((resolve) => {
      process.once('exit', (code, signal) => {
        this.rpc.failPending(new Error(`child exited (${signal ?? code})`));
        resolve({ code, signal });
      });
    });
  }

  /** Starts a holder process; `env` adds variables to its environment (e.g. another `TZ`). */
  static async spawn(
    config: ChildBackendConfig,
    lockerOptions: LockerOptions,
    handlers: Handlers = {},
    env: Record<string, string> = {},
  ): Promise<ChildHolder> {
    const holder = await ChildHolder.bare(handlers, env);
    await holder.rpc.call('init', config.module, config.export, config.options, lockerOptions);
    return holder;
  }

  /** Starts a child process with no locker in it yet (`spawn` makes one). */
  static async bare(handlers: Handlers = {}, env: Record<string, string> = {}): Promise<ChildHolder> {
    const child = fork(childEntry, [], {
      serialization: 'advanced',
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: { ...process.env, ...env },
    });
    const holder = new ChildHolder(child, handlers);
    await holder.waitFor('ready', 15_000);
    return holder;
  }

  /** `lock(key)` in the child: its handle id, token and owner. @throws the child's error. */
  lock(key: string, options?: LockOptions): Promise<{ id: number; token: bigint; owner: string }> {
    return this.rpc.call('lock', key, options);
  }

  /** A semaphore permit or a read or write lock, held by the child until `release(id)` or a kill. */
  acquireShared(key: string, family: SharedFamily, options?: LockOptions): Promise<{ id: number; token: bigint; owner: string }> {
    return this.rpc.call('acquireShared', key, family, options);
  }

  /** Releases the child's handle `id`. @throws the child's error. */
  release(id: number): Promise<void> {
    return this.rpc.call('release', id);
  }

  /** Resolves when the child has emitted `name` (counting earlier emissions). */
  async waitFor(name: string, timeoutMs: number): Promise<unknown> {
    const seen = this.events.find((e) => e.name === name);
    if (seen) return seen.data;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        off();
        reject(new Error(`child did not emit ${name} within ${timeoutMs} ms`));
      }, timeoutMs);
      const off = this.rpc.onEvent((n, data) => {
        if (n !== name) return;
        clearTimeout(timer);
        off();
        resolve(data);
      });
    });
  }

  /** Sends `signal` to the child, unless it has exited. */
  signal(signal: NodeJS.Signals): void {
    if (this.process.exitCode === null && this.process.signalCode === null) this.process.kill(signal);
  }

  /** SIGKILL, then wait for the exit. */
  async kill(): Promise<void> {
    this.signal('SIGCONT');
    this.signal('SIGKILL');
    await this.exited;
  }
}
