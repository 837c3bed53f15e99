/** @module @deadbolt/conformance/cluster */
/**
 * The clusters test-matrix runs (`test-matrix/clusters.sh`: three members each, on loopback) and
 * the faults a run stages on them: a member killed with SIGKILL and started again (with its data or
 * without), paused with SIGSTOP and resumed, made to stutter (stopped 300 ms of every 400: slow on
 * every link), stopped and restarted in turn (a rolling restart), cut
 * off from the other members while clients still reach it, or handed the lead; and the leader found
 * so that the fault lands where it hurts. A client's own partition comes from a `FaultProxy` in
 * front of every member. Pure TypeScript without the test runner.
 */
import { execFile } from 'node:child_process';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { matrixUrl } from './test-matrix.js';

/**
 * The cluster profiles (and PgBouncer, a profile of one member in front of PostgreSQL). The
 * Cassandra cluster is started only for the long run (`pnpm test:long`).
 */
export type ClusterName = 'etcd-cluster' | 'zookeeper-ensemble' | 'redis-sentinel' | 'pgbouncer' | 'cassandra-cluster';

const lib = fileURLToPath(new URL('../../../test-matrix/lib.sh', import.meta.url));
const run = promisify(execFile);

const URLS: Record<ClusterName, string> = {
  'etcd-cluster': 'etcd://127.0.0.1:23791,127.0.0.1:23792,127.0.0.1:23793',
  'zookeeper-ensemble': 'zookeeper://127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813',
  // The Sentinels; the primary they watch is named `deadbolt`.
  'redis-sentinel': 'redis://127.0.0.1:26480,127.0.0.1:26481,127.0.0.1:26482',
  // Pooling by transaction; `/deadbolt_session` pools by session. A test-matrix server as well.
  pgbouncer: matrixUrl('pgbouncer'),
  // Three nodes on three loopback addresses; keyspaces made at replication factor 3 by the tests.
  'cassandra-cluster': 'cassandra://127.0.0.2:9042,127.0.0.3:9042,127.0.0.4:9042/deadbolt',
};

/** The URL of a cluster profile (every member, or the Sentinels); `DEADBOLT_<NAME>_URL` overrides it. */
export function clusterUrl(name: ClusterName): string {
  return process.env[`DEADBOLT_${name.toUpperCase().replaceAll('-', '_')}_URL`] ?? URLS[name];
}

/**
 * What a server at `port` answers to `request` (sent as is): all it sends until it closes, or
 * until `complete` says the answer is whole; what came within 2 s if neither happens.
 */
function ask(port: number, request: string, complete: (text: string) => boolean = () => false): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    const socket = connect(port, '127.0.0.1', () => socket.write(request));
    const done = () => (clearTimeout(timer), socket.destroy(), resolve(text));
    const timer = setTimeout(done, 2000);
    socket.on('data', (chunk) => {
      text += chunk.toString();
      if (complete(text)) done();
    });
    socket.on('close', done);
    socket.on('error', done);
  });
}

/** What `Cluster.node` can do to a member. */
export type MemberAction =
  | 'kill'
  | 'stop'
  | 'pause'
  | 'stutter'
  | 'resume'
  | 'start'
  | 'start-empty'
  | 'partition'
  | 'heal'
  | 'elect'
  | 'port'
  | 'address'
  | 'health';

/** One of test-matrix's cluster profiles, driven by its scripts (test-matrix/lib.sh): faults on a member, its address, the cluster's health. Each method throws when its script fails. */
export class Cluster {
  /** The members a fault can hit: three, a Sentinel deployment's two data nodes, or PgBouncer. */
  readonly members: number[];
  constructor(readonly name: ClusterName) {
    this.members = name === 'redis-sentinel' ? [1, 2] : name === 'pgbouncer' ? [1] : [1, 2, 3];
  }

  /**
   * `lib.sh node <name> <n> <action>`; its output. `stutter` stops the member 300 ms of every 400
   * until `resume`, `start-empty` starts a stopped member with no data, `partition` / `heal` cut and restore its links to the other members (root only), `elect`
   * hands it the lead (etcd, Sentinel). @throws when the action fails or the store cannot do it.
   */
  async node(n: number, action: MemberAction): Promise<string> {
    // lib.sh bounds each action itself; a Cassandra node on a busy machine takes over a minute to start.
    return (await run('bash', [lib, 'node', this.name, String(n), action], { timeout: 300_000 })).stdout.trim();
  }

  /** The client port of member `n`. */
  async port(n: number): Promise<number> {
    return Number(await this.node(n, 'port'));
  }

  /** Where clients reach member `n` (Cassandra's nodes share a port on three addresses). */
  async address(n: number): Promise<{ host: string; port: number }> {
    const [host = '', port = ''] = (await this.node(n, 'address')).split(':');
    return { host, port: Number(port) };
  }

  /** Whether member `n` answers as part of a working cluster (0: whether the whole cluster is whole). */
  healthy(n: number): Promise<boolean> {
    return this.node(n, 'health').then(
      () => true,
      () => false,
    );
  }

  /**
   * Resolves once the cluster is whole again, by test-matrix's own health check (every member in
   * it; for Redis with Sentinel the replica attached and every Sentinel knowing the others), or
   * rejects after `ms`.
   */
  async allHealthy(ms = 60_000): Promise<void> {
    const deadline = performance.now() + ms;
    while (!(await this.healthy(0))) {
      if (performance.now() > deadline) throw new Error(`${this.name}: not whole after ${ms} ms`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }

  /**
   * The member that leads now (etcd's raft leader, ZooKeeper's leader, the primary the Sentinels
   * name, PgBouncer itself), asking each in turn; for Cassandra, which has no leader, the seed (the
   * first contact point, where a client's control connection goes). @throws when none says.
   */
  async leader(): Promise<number> {
    if (this.name === 'pgbouncer' || this.name === 'cassandra-cluster') return 1;
    if (this.name === 'redis-sentinel') {
      for (const sentinel of [26480, 26481, 26482]) {
        // `*2 $9 127.0.0.1 $4 6481`, each line ended by CRLF (or `*-1` when it knows no primary).
        const answer = await ask(
          sentinel,
          'SENTINEL get-master-addr-by-name deadbolt\r\n',
          (t) => t.startsWith('*-1') || t.split('\r\n').length > 5,
        );
        const primary = /(\d+)\r\n$/.exec(answer)?.[1];
        for (const n of this.members) if (primary && (await this.port(n)) === Number(primary)) return n;
      }
      throw new Error('redis-sentinel: no Sentinel names a primary');
    }
    for (const n of this.members) {
      const port = await this.port(n);
      if (this.name === 'zookeeper-ensemble') {
        if (/^Mode: leader/m.test(await ask(port, 'srvr'))) return n;
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
