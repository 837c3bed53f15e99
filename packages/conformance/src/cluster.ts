/**
 * The clusters test-matrix runs (`test-matrix/clusters.sh`: three members each, on loopback) and
 * the faults a run stages on them: a member killed with SIGKILL and started again, paused with
 * SIGSTOP and resumed, stopped and restarted in turn (a rolling restart), and the leader found so
 * that the fault lands where it hurts. A client's own partition comes from a `FaultProxy` in front
 * of every member. Pure TypeScript without the test runner.
 */
import { execFile } from 'node:child_process';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

/** The cluster profiles. */
export type ClusterName = 'etcd-cluster' | 'zookeeper-ensemble';

const lib = fileURLToPath(new URL('../../../test-matrix/lib.sh', import.meta.url));
const run = promisify(execFile);

/** The URL of a cluster profile (every member); `DEADBOLT_<NAME>_URL` overrides it. */
export function clusterUrl(name: ClusterName): string {
  const own = process.env[`DEADBOLT_${name.toUpperCase().replaceAll('-', '_')}_URL`];
  if (own) return own;
  return name === 'etcd-cluster'
    ? 'etcd://127.0.0.1:23791,127.0.0.1:23792,127.0.0.1:23793'
    : 'zookeeper://127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813';
}

/** One member's answer to ZooKeeper's `srvr` four-letter command, or '' when it does not answer within 2 s. */
function srvr(port: number): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    const socket = connect(port, '127.0.0.1', () => socket.end('srvr'));
    const done = () => (clearTimeout(timer), socket.destroy(), resolve(text));
    const timer = setTimeout(done, 2000);
    socket.on('data', (chunk) => (text += chunk.toString()));
    socket.on('close', done);
    socket.on('error', done);
  });
}

export class Cluster {
  readonly members = [1, 2, 3];
  constructor(readonly name: ClusterName) {}

  /** `lib.sh node <name> <n> <action>`; its output. @throws when the action fails. */
  async node(n: number, action: 'kill' | 'stop' | 'pause' | 'resume' | 'start' | 'port' | 'health'): Promise<string> {
    return (await run('bash', [lib, 'node', this.name, String(n), action], { timeout: 60_000 })).stdout.trim();
  }

  /** The client port of member `n`. */
  async port(n: number): Promise<number> {
    return Number(await this.node(n, 'port'));
  }

  /** Whether member `n` answers as part of a working cluster. */
  healthy(n: number): Promise<boolean> {
    return this.node(n, 'health').then(
      () => true,
      () => false,
    );
  }

  /** Resolves once every member answers (or rejects after `ms`). */
  async allHealthy(ms = 60_000): Promise<void> {
    const deadline = performance.now() + ms;
    for (;;) {
      const states = await Promise.all(this.members.map((n) => this.healthy(n)));
      if (states.every(Boolean)) return;
      if (performance.now() > deadline)
        throw new Error(`${this.name}: members ${states.map((ok, i) => (ok ? '' : i + 1)).join(' ')} not healthy after ${ms} ms`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }

  /** The member that leads now (etcd's raft leader, ZooKeeper's leader), asking each in turn. @throws when none says. */
  async leader(): Promise<number> {
    for (const n of this.members) {
      const port = await this.port(n);
      if (this.name === 'zookeeper-ensemble') {
        if (/^Mode: leader/m.test(await srvr(port))) return n;
        continue;
      }
      const answer = await fetch(`http://127.0.0.1:${port}/v3/maintenance/status`, {
        method: 'POST',
        body: '{}',
        signal: AbortSignal.timeout(2000),
      })
        .then((r) => r.json() as Promise<{ header?: { member_id?: string }; leader?: string }>)
        .catch(() => undefined);
      if (answer?.leader && answer.leader === answer.header?.member_id) return n;
    }
    throw new Error(`${this.name}: no member says it leads`);
  }
}
